"""A request cancelled while its records go to disk (its client reset the
connection: syncd/http/protocol.py cancels the request's task) still has
them counted and fanned out once they are durable: they are on disk all the
same, and a subscriber that missed their deltas would have a gap (syncd/service.py).
The subscriber is a real WebSocket client of a real server; the request is
run and cancelled in the server's loop as its connection's loss would."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import httpx
import msgpack
import pytest
from websockets.asyncio.client import ClientConnection

from syncd.auth import ROOT
from syncd.history.reads import Writer
from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS
from tests.ws.support import open_ws

NS = "demo"
BASE = f"/v1/namespaces/{NS}/crdts"
WAIT_S = 5.0


@pytest.fixture
async def server(make_server: Callable[..., Any]) -> RunningServer:
    # fsync per op: the records take a while to be durable, long after the
    # cancelled request's task was seen to apply them.
    result: RunningServer = await make_server(fsync="always")
    return result


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS) as c:
        yield c


async def _ops(client: httpx.AsyncClient, crdt_id: str, *bodies: dict[str, Any]) -> None:
    for body in bodies:
        r = await client.post(f"{BASE}/{crdt_id}/ops", json=body)
        assert r.status_code == 200, r.text


async def _subscribe(ws: ClientConnection, crdt_id: str) -> dict[str, Any]:
    """Subscribe: the snapshot (the ``synced`` message that ends the start checked and passed over)."""
    await ws.send(msgpack.packb({"kind": "subscribe", "id": crdt_id}))
    snapshot = await _delta(ws)
    synced = await _delta(ws)
    assert (synced["kind"], synced["seq"]) == ("synced", snapshot["seq"])
    return snapshot


async def _delta(ws: ClientConnection) -> dict[str, Any]:
    message: dict[str, Any] = msgpack.unpackb(await asyncio.wait_for(ws.recv(), WAIT_S))
    return message


async def _cancel_once_applied(work: Coroutine[Any, Any, Any], applied: Callable[[], bool]) -> None:
    """Run ``work`` and cancel it as soon as it has applied its change in
    memory (``applied()``), before its records can be durable."""
    task = asyncio.create_task(work)
    async with asyncio.timeout(WAIT_S):
        while not applied():
            await asyncio.sleep(0)
    assert not task.done()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _at_seq(server: RunningServer, crdt_id: str, seq: int) -> Callable[[], bool]:
    def reached() -> bool:
        entry = server.app.engine.get(NS, crdt_id)
        return entry is not None and entry.seq >= seq

    return reached


async def test_a_cancelled_restore_reaches_subscribers(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    await _ops(client, "pn:r", *[{"op": "increment", "amount": 2}] * 3)
    async with open_ws(server) as ws:
        assert (await _subscribe(ws, "pn:r"))["seq"] == 3
        restore = server.app.history.restore(NS, "pn:r", 1, ROOT, None, "http")
        await _cancel_once_applied(restore, _at_seq(server, "pn:r", 4))
        await _ops(client, "pn:r", {"op": "increment"})
        deltas = [await _delta(ws), await _delta(ws)]
    assert [(d["kind"], d["seq"]) for d in deltas] == [("op", 4), ("op", 5)]
    assert deltas[0]["op"]["op"] == "decrement"


async def test_a_cancelled_revert_reaches_subscribers(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    await _ops(client, "or:s", {"op": "add", "element": "a"}, {"op": "add", "element": "b"})
    async with open_ws(server) as ws:
        assert (await _subscribe(ws, "or:s"))["seq"] == 2
        revert = server.app.reverts.revert(
            NS, "or:s", Writer(client_id=ROOT.client_id), None, None, ROOT, None, "http"
        )
        await _cancel_once_applied(revert, _at_seq(server, "or:s", 3))
        await _ops(client, "or:s", {"op": "add", "element": "c"})
        seqs = []
        while not seqs or seqs[-1] < 5:
            seqs.append((await _delta(ws))["seq"])
    assert seqs == [3, 4, 5]  # the revert's two removes, then the add


async def test_a_cancelled_delete_reaches_subscribers_and_holds_back_loads(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    await _ops(client, "gc:d", {"op": "increment"})
    engine = server.app.engine
    async with open_ws(server) as ws:
        assert (await _subscribe(ws, "gc:d"))["seq"] == 1
        delete = server.app.service.delete(NS, "gc:d")
        await _cancel_once_applied(delete, lambda: engine.get(NS, "gc:d") is None)
        # Until the delete is durable, a read waits for it instead of loading
        # the old life back from the store.
        read = await client.get(f"{BASE}/gc:d")
        assert read.status_code == 404, read.text
        await _ops(client, "gc:d", {"op": "increment"})
        deltas = [await _delta(ws), await _delta(ws)]
    assert [(d["kind"], d.get("seq")) for d in deltas] == [("deleted", None), ("op", 1)]
