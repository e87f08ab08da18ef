"""Replies queued behind a running op count against MAX_INFLIGHT_OPS.

Answers go out in arrival order, so the reply to a ping (or a subscribe
error, or a malformed message) sent behind an op still waiting for its commit
waits in the session until that op is answered. Those replies are the
connection's memory as much as the op's: reading stops once MAX_INFLIGHT_OPS
answers are owed, whatever they answer. The store here is a real embedded
store whose writes wait on a gate (tests/store/support.py), so one op stays
in flight as long as the test wants.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import msgpack
import pytest

from syncd.app import App
from syncd.server import Server
from syncd.ws.connection import WsConnection
from syncd.ws.session import MAX_INFLIGHT_OPS
from tests.conftest import RunningServer, base_settings
from tests.store.support import Faults, faulty_opener
from tests.ws.support import RawWs, client_frame, wait_for

PINGS = MAX_INFLIGHT_OPS * 3


@pytest.fixture
async def gated(tmp_path: Path) -> AsyncIterator[tuple[RunningServer, Faults]]:
    faults = Faults()
    settings = base_settings(tmp_path / "data", fsync="batch")
    app = App(settings, store_options={"opener": faulty_opener(faults), "probe_interval": 0.02})
    server = Server(settings, app)
    await server.start()
    try:
        yield RunningServer(server), faults
    finally:
        if faults.gate is not None:
            faults.gate.set()
        await server.shutdown()


async def test_replies_behind_a_running_op_stop_reading_at_the_bound(
    gated: tuple[RunningServer, Faults],
) -> None:
    server, faults = gated
    raw = await RawWs.connect(server)
    (connection,) = server.server.ctx.other_connections
    assert isinstance(connection, WsConnection)
    session = connection.session
    faults.gate = threading.Event()
    faults.entered.clear()
    raw.send_message({"kind": "op", "id": "gc:slow", "op": {"op": "increment"}, "ref": "op"})
    await asyncio.get_running_loop().run_in_executor(None, faults.entered.wait, 5)
    # Every ping's pong must wait behind the op's ack.
    for ref in range(PINGS):
        raw.send(client_frame(0x2, msgpack.packb({"kind": "ping", "ref": ref})))
    await raw.writer.drain()
    await wait_for(lambda: session.held or len(session._replies or ()) > MAX_INFLIGHT_OPS)
    assert session.held
    assert len(session._replies or ()) == MAX_INFLIGHT_OPS  # the op and the pongs behind it

    # The commit goes through: the ack, then every pong, in order; nothing lost.
    faults.gate.set()
    opcode, payload = await raw.frame()
    assert msgpack.unpackb(payload) == {"kind": "ack", "ref": "op", "seq": 1}
    for ref in range(PINGS):
        opcode, payload = await raw.frame()
        assert (opcode, msgpack.unpackb(payload)) == (0x2, {"kind": "pong", "ref": ref})
    assert not session.held and session.inflight == 0
    raw.close()
