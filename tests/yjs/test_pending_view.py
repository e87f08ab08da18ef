"""The JSON read view of a Yjs document (``GET …/crdts/:id``: ``value``, the
whole document as one update) carries the updates that wait for their
dependencies merged in, as ``?format=crdt`` does (YDoc.view).

A client that loads the view's update, then resumes from its ``seq``, gets
only the op deltas after it; the one that lets a waiting update in carries
only the dependency. With the integrated document alone in ``value``, that
client never had the waiting update. Real server, real sockets.
"""

from __future__ import annotations

import json

import httpx
import pytest
import websockets

from tests.conftest import RunningServer
from tests.http.test_events import SseReader
from tests.http.test_openapi import answer_conforms
from tests.yjs.test_pending_subscribers import (
    CRDT,
    ID,
    _b64,
    _recv,
    _text,
    _waiting,
    _write,
    _ws_url,
)


@pytest.mark.parametrize("at", ["", "?at=1"])
async def test_a_view_loaded_while_an_update_waits_then_resumed_gives_the_document(
    server: RunningServer, at: str
) -> None:
    """The view now (or ``?at=SEQ``), then the op deltas after its seq over
    the WebSocket."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        headers, first = await _waiting(client)
        r = await client.get(f"{CRDT}{at}", headers=headers)
        answer_conforms(r, "/v1/namespaces/{ns}/crdts/{id}", "get")
        view = r.json()
        assert view["seq"] == 1
        held = view["value"]
        assert _text(held) == ""  # it waits in the reader's copy too
        assert await _write(client, headers, first) == 2
        async with websockets.connect(_ws_url(server, headers)) as ws:
            resume = {"since": view["seq"], "epoch": view["epoch"]}
            await ws.send(json.dumps({"kind": "subscribe", "id": ID, **resume}))
            delta = await _recv(ws)
        assert (delta["kind"], delta["seq"]) == ("op", 2)
        assert delta["op"]["update"] == _b64(first)  # the dependency alone
        assert _text(held, delta["op"]["update"]) == "hello world"


async def test_a_view_then_an_sse_resume_gives_the_document(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        headers, first = await _waiting(client)
        view = (await client.get(CRDT, headers=headers)).json()
        assert await _write(client, headers, first) == 2
        query = f"?since={view['seq']}&epoch={view['epoch']}"
        sse, status, _ = await SseReader.open(server.port, f"{CRDT}/events{query}", headers)
        try:
            assert status == 200
            delta = await sse.event()
        finally:
            sse.close()
        assert (delta["kind"], delta["seq"]) == ("op", 2)
        assert _text(view["value"], delta["op"]["update"]) == "hello world"


async def test_the_view_is_the_replica_update_and_the_state_vector_the_integrated_one(
    server: RunningServer,
) -> None:
    """``value`` is ``?format=crdt``'s update (the same bytes); the state
    vector stays the integrated document's (as Yjs's, which leaves what it
    holds as pending out): what a client asks for with it is sent again,
    harmlessly. A root read is the integrated document's."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        headers, first = await _waiting(client)
        view = (await client.get(CRDT, headers=headers)).json()
        crdt = (await client.get(f"{CRDT}?format=crdt", headers=headers)).json()
        assert view["value"] == crdt["state"]["update"]
        assert view["state_vector"] == _b64(b"\x00")  # nothing integrated yet
        root = (await client.get(f"{CRDT}?root=content", headers=headers)).json()
        assert root["value"] == ""
        await _write(client, headers, first)
        view = (await client.get(CRDT, headers=headers)).json()
        crdt = (await client.get(f"{CRDT}?format=crdt", headers=headers)).json()
        assert view["value"] == crdt["state"]["update"]
        assert _text(view["value"]) == "hello world"
