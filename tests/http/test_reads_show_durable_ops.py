"""A read of a CRDT shows only ops that are durable (docs/protocol.md,
"Durability and ordering"): ``GET`` of a CRDT (its view, ``?format=crdt``,
a Yjs root) and the state of ``POST .../ops?return=state``.

Memory is ahead of the store by the ops in flight (applied, their records in
the group commit on their way to disk). A read answered from memory then showed
an op that a failed write removes, or a crash right after the read undoes. The
server is real and its log writes wait on a gate, or fail, when the test says
(tests/store/support.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from pycrdt import Doc, Text

from syncd.crdt.ydoc import b64
from tests.conftest import RunningServer
from tests.store.support import ENOSPC, Faults, gated_server
from tests.ws.support import NS, mint, wait_for

QUIET_S = 0.3
"""How long an answer that must wait is given to come early."""

COUNTER = "gc:read"


@contextlib.asynccontextmanager
async def gated_client(
    data_dir: Path,
) -> AsyncIterator[tuple[RunningServer, Faults, httpx.AsyncClient]]:
    """A gated server (``gated_server``) and an HTTP client of it with a token."""
    async with (
        gated_server(data_dir) as (server, faults),
        httpx.AsyncClient(
            base_url=server.url, headers={"authorization": f"Bearer {mint()}"}
        ) as client,
    ):
        yield server, faults, client


def _url(crdt_id: str, query: str = "") -> str:
    return f"/v1/namespaces/{NS}/crdts/{crdt_id}{query}"


async def _post(
    client: httpx.AsyncClient, crdt_id: str, body: Any, query: str = ""
) -> httpx.Response:
    return await client.post(_url(crdt_id, "/ops" + query), json=body)


def _hold(faults: Faults) -> threading.Event:
    """From now on the log's writes wait for the event returned."""
    gate = threading.Event()
    faults.entered.clear()
    faults.gate = gate
    return gate


async def _in_flight(faults: Faults) -> None:
    """A write has reached the (held) file: its op is applied, not durable."""
    await wait_for(faults.entered.is_set)


async def test_a_get_waits_for_the_op_in_flight_and_other_crdts_answer_at_once(
    tmp_path: Path,
) -> None:
    async with gated_client(tmp_path / "data") as (server, faults, client):
        for crdt_id in (COUNTER, "gc:quiet"):
            r = await _post(client, crdt_id, {"op": "increment"})
            assert r.status_code == 200, r.text
        gate = _hold(faults)
        write = asyncio.create_task(_post(client, COUNTER, {"op": "increment", "amount": 5}))
        await _in_flight(faults)
        reads = [
            asyncio.create_task(client.get(_url(COUNTER, query))) for query in ("", "?format=crdt")
        ]
        # A CRDT with nothing in flight is read at once, the held write notwithstanding.
        r = await asyncio.wait_for(client.get(_url("gc:quiet")), QUIET_S * 3)
        assert r.status_code == 200 and r.json()["value"] == 1, r.text
        await asyncio.sleep(QUIET_S)
        early = [task.result().json() for task in reads if task.done()]
        assert not early, f"answered while the op was on its way to disk: {early}"
        gate.set()
        assert (await write).status_code == 200
        view, full = [(await task).json() for task in reads]
        assert view["value"] == 6 and view["seq"] == 2, view
        assert full["seq"] == 2 and "state" in full, full


async def test_a_get_never_shows_an_op_whose_write_fails(tmp_path: Path) -> None:
    async with gated_client(tmp_path / "data") as (server, faults, client):
        r = await _post(client, COUNTER, {"op": "increment"})
        assert r.status_code == 200, r.text
        gate = _hold(faults)
        write = asyncio.create_task(_post(client, COUNTER, {"op": "increment", "amount": 5}))
        await _in_flight(faults)
        read = asyncio.create_task(client.get(_url(COUNTER)))
        await asyncio.sleep(QUIET_S)
        faults.write_errno = ENOSPC
        gate.set()
        assert (await write).status_code == 503
        r = await read
        assert r.status_code == 200, r.text
        assert (r.json()["value"], r.json()["seq"]) == (1, 1), r.json()
        # And while the disk stays full, reads go on answering what is durable.
        r = await asyncio.wait_for(client.get(_url(COUNTER)), QUIET_S * 3)
        assert (r.json()["value"], r.json()["seq"]) == (1, 1), r.json()
        faults.clear()
        await wait_for(lambda: server.app.service.writable)


async def test_a_yjs_root_read_waits_for_the_edit_in_flight(tmp_path: Path) -> None:
    doc_id = "yd:notes"
    async with gated_client(tmp_path / "data") as (server, faults, client):
        doc: Doc[Any] = Doc()
        text = doc.get("content", type=Text)
        text.insert(0, "hello")
        r = await _post(client, doc_id, {"op": "update", "update": b64(doc.get_update())})
        assert r.status_code == 200, r.text
        before = doc.get_state()
        text.insert(5, " world")
        edit = doc.get_update(before)
        gate = _hold(faults)
        faults.write_errno = ENOSPC
        write = asyncio.create_task(_post(client, doc_id, {"op": "update", "update": b64(edit)}))
        await _in_flight(faults)
        read = asyncio.create_task(client.get(_url(doc_id, "?root=content&as=text")))
        await asyncio.sleep(QUIET_S)
        gate.set()
        assert (await write).status_code == 503
        r = await read
        assert r.status_code == 200, r.text
        assert r.json()["value"] == "hello", r.json()
        faults.clear()
        await wait_for(lambda: server.app.service.writable)


async def test_return_state_does_not_show_a_later_op_still_in_flight(tmp_path: Path) -> None:
    """The state of ``?return=state`` is read once the request's ops are durable;
    an op applied after them and still on its way to disk is not in it."""
    async with gated_client(tmp_path / "data") as (server, faults, client):
        r = await _post(client, COUNTER, {"op": "increment"})
        assert r.status_code == 200, r.text
        first = _hold(faults)
        ours = asyncio.create_task(
            _post(client, COUNTER, {"op": "increment", "amount": 10}, "?return=state")
        )
        await _in_flight(faults)
        later = asyncio.create_task(_post(client, COUNTER, {"op": "increment", "amount": 100}))
        await wait_for(lambda: server.app.engine.get(NS, COUNTER).seq == 3)  # type: ignore[union-attr]
        # Our write goes through; the later op's write, in the next batch, is held.
        second = _hold(faults)
        first.set()
        done, _ = await asyncio.wait({ours}, timeout=QUIET_S)
        if done:
            state = ours.result().json()["state"]
            assert state["value"] == 11, f"shows an op still in flight: {state}"
        second.set()
        r = await ours
        assert r.status_code == 200, r.text
        assert r.json()["seq"] == 2
        assert r.json()["state"]["value"] in (11, 111), r.json()
        assert (await later).status_code == 200
