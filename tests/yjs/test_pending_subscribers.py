"""A native subscriber, or a ``?format=crdt`` reader, that starts while a Yjs
update waits for its dependency gets that update (YDoc.replica_state).

The state handed to them was the integrated document alone, and Yrs leaves
what it holds as pending out of that: when the dependency came, the op
delta they got carried the dependency alone, and their copy never had the
update that waited (acknowledged, durable, lost to them). The state now
carries it merged in, as Yjs's encodeStateAsUpdate has it: their Yjs holds
it as pending in turn and integrates it with the dependency. Real server,
real sockets; each replica a pycrdt document (or the Python client's).
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import httpx
import pytest
import websockets
from pycrdt import Doc, Text

from syncd.client import AsyncClient
from syncd.crdt.ydoc import YDoc, root_view
from tests.client.conftest import make_token
from tests.conftest import RunningServer
from tests.crdt.crdt_testlib import dependent_updates
from tests.http.support import issue
from tests.http.test_events import SseReader
from tests.http.test_openapi import answer_conforms

NS = "app"
ID = "yd:notes"
CRDT = f"/v1/namespaces/{NS}/crdts/{ID}"
STALE_EPOCH = "00000000deadbeef"
"""An epoch the document never had: a resume with it gets a snapshot (a resync)."""
WAIT_S = 5.0


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def _write(client: httpx.AsyncClient, headers: dict[str, str], update: bytes) -> int:
    r = await client.post(
        f"{CRDT}/ops", headers=headers, json={"op": "update", "update": _b64(update)}
    )
    assert r.status_code == 200, r.text
    seq: int = r.json()["seq"]
    return seq


def _text(*updates: str) -> str:
    """The ``content`` text of a Yjs document that applied ``updates`` (base64) in order."""
    doc: Doc[Any] = Doc()
    for update in updates:
        doc.apply_update(base64.b64decode(update))
    return str(doc.get("content", type=Text))


async def _waiting(client: httpx.AsyncClient) -> tuple[dict[str, str], bytes]:
    """A token, and the dependency of the update written (seq 1) that waits for it."""
    headers = await issue(client)
    _, first, second = dependent_updates()
    assert await _write(client, headers, second) == 1
    r = await client.get(f"{CRDT}?root=content", headers=headers)
    assert r.json()["value"] == ""  # it waits on the server
    return headers, first


def _ws_url(server: RunningServer, headers: dict[str, str]) -> str:
    token = headers["authorization"].removeprefix("Bearer ")
    return f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/ws?token={token}"


async def _recv(ws: Any) -> dict[str, Any]:
    """The next delta or reply (JSON text frames: the subscription was sent as JSON)."""
    message: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
    return message


@pytest.mark.parametrize("resume", [{}, {"since": 1, "epoch": STALE_EPOCH}])
async def test_a_websocket_subscriber_gets_what_waits_in_its_snapshot(
    server: RunningServer, resume: dict[str, Any]
) -> None:
    """Subscribing afresh, or resyncing (a stale epoch: a snapshot again)."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        headers, first = await _waiting(client)
        async with websockets.connect(_ws_url(server, headers)) as ws:
            await ws.send(json.dumps({"kind": "subscribe", "id": ID, **resume}))
            snapshot = await _recv(ws)
            assert (snapshot["kind"], snapshot["seq"]) == ("snapshot", 1)
            held = snapshot["state"]["update"]
            assert _text(held) == ""  # waits in the subscriber's copy too
            assert (await _recv(ws))["kind"] == "synced"  # the end of the start
            assert await _write(client, headers, first) == 2
            delta = await _recv(ws)
        assert (delta["kind"], delta["seq"]) == ("op", 2)
        assert delta["op"]["update"] == _b64(first)  # the dependency alone
        assert _text(held, delta["op"]["update"]) == "hello world"


@pytest.mark.parametrize("query", ["", f"?since=1&epoch={STALE_EPOCH}"])
async def test_an_sse_subscriber_gets_what_waits_in_its_snapshot(
    server: RunningServer, query: str
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        headers, first = await _waiting(client)
        sse, status, _ = await SseReader.open(server.port, f"{CRDT}/events{query}", headers)
        try:
            assert status == 200
            snapshot = await sse.event()
            assert (snapshot["kind"], snapshot["seq"]) == ("snapshot", 1)
            held = snapshot["state"]["update"]
            assert await _write(client, headers, first) == 2
            delta = await sse.event()
        finally:
            sse.close()
        assert (delta["kind"], delta["seq"]) == ("op", 2)
        assert _text(held, delta["op"]["update"]) == "hello world"


@pytest.mark.parametrize("at", ["", "&at=1"])
async def test_a_crdt_format_read_then_the_deltas_after_it_gives_the_document(
    server: RunningServer, at: str
) -> None:
    """``?format=crdt`` (now, or ``&at=SEQ``), then the op deltas after its
    seq (a resume from it)."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        headers, first = await _waiting(client)
        read = (await client.get(f"{CRDT}?format=crdt{at}", headers=headers)).json()
        assert read["seq"] == 1
        held = read["state"]["update"]
        assert await _write(client, headers, first) == 2
        async with websockets.connect(_ws_url(server, headers)) as ws:
            resume = {"since": read["seq"], "epoch": read["epoch"]}
            await ws.send(json.dumps({"kind": "subscribe", "id": ID, **resume}))
            delta = await _recv(ws)
        assert (delta["kind"], delta["seq"]) == ("op", 2)
        assert _text(held, delta["op"]["update"]) == "hello world"
        # The JSON reads keep the integrated document alone.
        view = (await client.get(CRDT, headers=headers)).json()
        assert _text(view["value"]) == "hello world"


async def test_the_state_lists_what_waits_and_a_root_read_leaves_it_out(
    server: RunningServer,
) -> None:
    """The state carries what waits twice: merged into its update (for a Yjs
    client) and under ``pending`` as it came (for a replica of the type), as
    documented. The view's update is the state's (tests/yjs/test_pending_view.py);
    a root's JSON is the integrated document: what waits is not in it until
    its dependency comes (_waiting)."""
    _, first, second = dependent_updates()
    async with httpx.AsyncClient(base_url=server.url) as client:
        headers, _ = await _waiting(client)
        r = await client.get(f"{CRDT}?format=crdt", headers=headers)
        answer_conforms(r, "/v1/namespaces/{ns}/crdts/{id}", "get")
        state = r.json()["state"]
        assert state["pending"] == [_b64(second)]
        view = (await client.get(CRDT, headers=headers)).json()
        assert view["value"] == state["update"]
        assert _text(view["value"], _b64(first)) == "hello world"
        # Once it is integrated, nothing waits: the state is the update alone.
        await _write(client, headers, first)
        r = await client.get(f"{CRDT}?format=crdt", headers=headers)
        assert list(r.json()["state"]) == ["update"]
        assert _text(r.json()["state"]["update"]) == "hello world"


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_a_python_client_replica_gets_what_waits(server: RunningServer, via: str) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        headers, first = await _waiting(client)
        async with (
            AsyncClient(server.url, make_token(3), NS) as reader,
            await reader.replica(ID, via=via) as replica,
        ):
            assert replica.seq == 1
            assert await _write(client, headers, first) == 2
            await replica.wait_for_seq(2, WAIT_S)
            assert isinstance(replica.crdt, YDoc)
            assert root_view(replica.crdt.encoded(), "content", "text") == "hello world"
