"""What a connection holds while the store is slow counts against MAX_INFLIGHT_OPS.

Answers go out in arrival order, so the reply to a ping (or a subscribe
error, or a malformed message) sent behind an op still waiting for its commit
waits in the session until that op is answered; and a subscribe to a CRDT not
in memory starts once the store has loaded it, whether or not it was
unsubscribed meanwhile. Both are the connection's memory as much as an op is:
reading stops once MAX_INFLIGHT_OPS of them wait, and resumes at half.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from syncd.ws import connection as ws_connection
from syncd.ws.connection import WsConnection
from syncd.ws.session import MAX_INFLIGHT_OPS
from tests.conftest import RunningServer
from tests.store.support import Faults, gated_server
from tests.ws.support import RawWs, client_frame, wait_for

PINGS = MAX_INFLIGHT_OPS * 3


PING_S = 0.3
"""The keepalive interval of the gated server: short, so a test can wait
several out."""


@pytest.fixture
async def gated(tmp_path: Path) -> AsyncIterator[tuple[RunningServer, Faults]]:
    """A server on a real embedded store whose writes wait on a gate
    (tests/store/support.py): an op stays in flight as long as the test wants."""
    async with gated_server(tmp_path / "data", ws_ping_s=PING_S) as pair:
        yield pair


async def _hold_one_op(server: RunningServer, faults: Faults, raw: RawWs) -> None:
    """Send an op whose commit waits on the gate, until the store has it."""
    faults.gate = threading.Event()
    faults.entered.clear()
    raw.send_message({"kind": "op", "id": "gc:slow", "op": {"op": "increment"}, "ref": "op"})
    await asyncio.get_running_loop().run_in_executor(None, faults.entered.wait, 5)


async def test_replies_behind_a_running_op_stop_reading_at_the_bound(
    gated: tuple[RunningServer, Faults],
) -> None:
    server, faults = gated
    raw = await RawWs.connect(server)
    (connection,) = server.server.ctx.other_connections
    assert isinstance(connection, WsConnection)
    session = connection.session
    await _hold_one_op(server, faults, raw)
    # Every ping's pong must wait behind the op's ack.
    for ref in range(PINGS):
        raw.send(client_frame(0x2, msgpack.packb({"kind": "ping", "ref": ref})))
    await raw.writer.drain()
    await wait_for(lambda: session.held or len(session._replies or ()) > MAX_INFLIGHT_OPS)
    assert session.held
    assert len(session._replies or ()) == MAX_INFLIGHT_OPS  # the op and the pongs behind it

    # The commit goes through: the ack, then every pong, in order; nothing lost.
    assert faults.gate is not None
    faults.gate.set()
    opcode, payload = await raw.frame()
    assert msgpack.unpackb(payload) == {"kind": "ack", "ref": "op", "seq": 1, "applied": 1}
    for ref in range(PINGS):
        opcode, payload = await raw.frame()
        assert (opcode, msgpack.unpackb(payload)) == (0x2, {"kind": "pong", "ref": ref})
    assert not session.held and session.inflight == 0
    raw.close()


async def test_subscribes_waiting_for_the_store_stop_reading_at_the_bound(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = server.app.store
    gate = asyncio.Event()
    real_load = store.load

    async def held_load(ns: str, crdt_id: str) -> Any:
        await gate.wait()  # a slow store: every load waits until the test says
        return await real_load(ns, crdt_id)

    monkeypatch.setattr(store, "load", held_load)
    raw = await RawWs.connect(server)
    (connection,) = server.server.ctx.other_connections
    assert isinstance(connection, WsConnection)
    session = connection.session
    # Subscribe and unsubscribe, each to another CRDT not in memory: no reply
    # is owed, but each start waits for its load.
    pairs = MAX_INFLIGHT_OPS * 3
    raw.send(
        b"".join(
            client_frame(0x2, msgpack.packb({"kind": kind, "id": f"gc:n{i}"}))
            for i in range(pairs)
            for kind in ("subscribe", "unsubscribe")
        )
    )
    await raw.writer.drain()
    await wait_for(lambda: session.held or len(ws_connection._background) > MAX_INFLIGHT_OPS)
    assert session.held and session.inflight == MAX_INFLIGHT_OPS
    assert len(ws_connection._background) == MAX_INFLIGHT_OPS

    # The store answers: the rest is read, nothing is sent for them, and the
    # connection is as before.
    gate.set()
    raw.send_message({"kind": "subscribe", "id": "gc:after"})
    opcode, payload = await raw.frame()
    assert msgpack.unpackb(payload)["id"] == "gc:after"
    await wait_for(lambda: not ws_connection._background)
    assert not session.held and session.inflight == 0
    assert list(connection.subscriptions) == ["gc:after"]
    raw.close()


async def test_a_connection_whose_reading_we_hold_is_not_taken_for_silent(
    gated: tuple[RunningServer, Faults],
) -> None:
    """While the session holds reading (answers owed at the bound), what the
    peer sends waits unread: the keepalive neither pings nor closes it 1011."""
    server, faults = gated
    raw = await RawWs.connect(server)
    (connection,) = server.server.ctx.other_connections
    assert isinstance(connection, WsConnection)
    await _hold_one_op(server, faults, raw)
    raw.send(client_frame(0x2, msgpack.packb({"kind": "ping"})) * MAX_INFLIGHT_OPS)
    await wait_for(lambda: connection.session.held)
    # Several keepalive intervals: nothing comes (no ping, no close).
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(raw.frame(), 4 * PING_S)
    assert faults.gate is not None
    faults.gate.set()
    opcode, payload = await raw.frame()
    assert msgpack.unpackb(payload) == {"kind": "ack", "ref": "op", "seq": 1, "applied": 1}
    for _ in range(MAX_INFLIGHT_OPS):  # those read before the hold, then the rest
        assert msgpack.unpackb((await raw.frame())[1]) == {"kind": "pong"}
    # Reading again, the keepalive is as ever: a silent peer is pinged.
    assert await raw.frame() == (0x9, b"")
    raw.close()
