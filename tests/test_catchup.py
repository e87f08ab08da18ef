"""What a subscriber starts from is durable (syncd/catchup.py, CrdtService.durable_state).

A snapshot, a resync's snapshot or "up to date at seq N" is never taken from
ops still in flight: were their write to fail, the next op would take their
seq and the subscriber, holding the phantom, would skip it as already held
and stay apart from the server for good. Each test holds an op's write on a
real embedded store (tests/store/support.py: a gate, then ENOSPC), starts a
subscriber meanwhile, lets the write fail and the store recover, and checks
that the subscriber starts from what the server holds and then sees the next
op: real server, real sockets.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest

from syncd.ws.connection import WsConnection
from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS
from tests.store.support import ENOSPC, Faults, gated_server
from tests.ws.support import NS, WAIT_S, RawWs, open_ws, recv, send_mp, wait_for

CRDT = "gc:p"
EVENTS = f"/v1/namespaces/{NS}/crdts/{CRDT}/events"


@pytest.fixture
async def gated(tmp_path: Path) -> AsyncIterator[tuple[RunningServer, Faults]]:
    """A server on a real embedded store whose writes can be held on a gate."""
    async with gated_server(tmp_path / "data") as pair:
        yield pair


async def _op(raw: RawWs, ref: str, amount: int) -> dict[str, Any]:
    raw.send_message(
        {"kind": "op", "id": CRDT, "op": {"op": "increment", "amount": amount}, "ref": ref}
    )
    return dict(msgpack.unpackb((await raw.frame())[1]))


async def _hold_failing_op(faults: Faults, raw: RawWs) -> None:
    """Send ``increment 100`` (seq 2) and hold its write; it fails once let go."""
    faults.gate = threading.Event()
    faults.entered.clear()
    raw.send_message(
        {"kind": "op", "id": CRDT, "op": {"op": "increment", "amount": 100}, "ref": "held"}
    )
    await asyncio.get_running_loop().run_in_executor(None, faults.entered.wait, WAIT_S)
    faults.write_errno = ENOSPC


async def _fail_and_recover(
    server: RunningServer, faults: Faults, raw: RawWs, durable: int = 1
) -> None:
    """Let the held write fail (503 to its writer); the store recovers and the
    service rebuilds memory from it (seq ``durable`` again: the held op is gone)."""
    assert faults.gate is not None
    faults.gate.set()
    answer = msgpack.unpackb((await raw.frame())[1])
    assert (answer["kind"], answer["ref"], answer["error"]) == ("error", "held", "unavailable")
    faults.clear()
    service = server.app.service
    await wait_for(lambda: service.writable)
    entry = server.app.engine.get(NS, CRDT)
    assert entry is None or entry.seq == durable


async def _snapshot_then_the_next_op(ws: Any, writer: RawWs, seq: int) -> None:
    """The subscriber's next message is a snapshot at ``seq``, and the writer's
    next op, numbered ``seq + 1``, reaches it as a delta."""
    snapshot = await recv(ws)
    assert (snapshot["kind"], snapshot["seq"]) == ("snapshot", seq)
    assert (await _op(writer, "next", 1))["seq"] == seq + 1
    delta = await recv(ws)
    assert (delta["kind"], delta["seq"]) == ("op", seq + 1)


async def _writer_at_seq_1(server: RunningServer) -> tuple[RawWs, str]:
    """A writer connection, and the CRDT at seq 1 (its epoch)."""
    raw = await RawWs.connect(server)
    ack = await _op(raw, "first", 1)
    assert (ack["kind"], ack["seq"]) == ("ack", 1)
    entry = server.app.engine.get(NS, CRDT)
    assert entry is not None
    return raw, entry.epoch


async def test_a_ws_subscribe_starts_from_durable_state(
    gated: tuple[RunningServer, Faults],
) -> None:
    server, faults = gated
    writer, _ = await _writer_at_seq_1(server)
    await _hold_failing_op(faults, writer)
    async with open_ws(server) as ws:
        await send_mp(ws, {"kind": "subscribe", "id": CRDT})
        # The op at seq 2 is in memory, not on disk: no snapshot holds it.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(ws.recv(), 0.2)
        await _fail_and_recover(server, faults, writer)
        snapshot = await recv(ws)
        assert (snapshot["kind"], snapshot["seq"]) == ("snapshot", 1)
        # The next op is the real seq 2, and the subscriber gets it.
        assert (await _op(writer, "next", 1))["seq"] == 2
        delta = await recv(ws)
        assert (delta["kind"], delta["seq"], delta["op"]["amount"]) == ("op", 2, 1)
    writer.close()


async def test_a_ws_subscribe_waits_for_the_write_then_skips_nothing(
    gated: tuple[RunningServer, Faults],
) -> None:
    """The held write succeeds: the snapshot (at seq 2) comes once it is
    durable, and the deltas after it follow without a gap or a repeat."""
    server, faults = gated
    writer, _ = await _writer_at_seq_1(server)
    await _hold_failing_op(faults, writer)
    faults.clear()  # this write will go through
    async with open_ws(server) as ws:
        await send_mp(ws, {"kind": "subscribe", "id": CRDT})
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(ws.recv(), 0.2)
        assert faults.gate is not None
        faults.gate.set()
        assert msgpack.unpackb((await writer.frame())[1])["seq"] == 2
        await _snapshot_then_the_next_op(ws, writer, 2)
    writer.close()


async def test_a_ws_resync_starts_from_durable_state(
    gated: tuple[RunningServer, Faults],
) -> None:
    server, faults = gated
    writer, _ = await _writer_at_seq_1(server)
    async with open_ws(server) as ws:
        await send_mp(ws, {"kind": "subscribe", "id": CRDT})
        assert (await recv(ws))["seq"] == 1
        assert (await recv(ws, synced=True))["kind"] == "synced"  # the start's end
        (subscriber,) = [
            c
            for c in server.server.ctx.other_connections
            if isinstance(c, WsConnection) and CRDT in c.subscriptions
        ]
        # Its transport over its bound (as the transport would say): the delta
        # of seq 2 is skipped and the subscription lags.
        subscriber.pause_writing()
        assert (await _op(writer, "second", 1))["seq"] == 2
        await wait_for(lambda: subscriber.subscriptions[CRDT].lag)
        await _hold_failing_op(faults, writer)  # seq 3, in flight
        subscriber.resume_writing()  # drained: a resync, not from the op in flight
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(ws.recv(), 0.2)
        await _fail_and_recover(server, faults, writer, 2)
        await _snapshot_then_the_next_op(ws, writer, 2)
    writer.close()


async def test_a_ws_resume_is_not_up_to_date_at_a_seq_in_flight(
    gated: tuple[RunningServer, Faults],
) -> None:
    """``since`` equal to the seq of an op in flight is not "up to date": once
    the write failed, the subscriber gets a snapshot of what the server holds."""
    server, faults = gated
    writer, epoch = await _writer_at_seq_1(server)
    await _hold_failing_op(faults, writer)
    async with open_ws(server) as ws:
        await send_mp(ws, {"kind": "subscribe", "id": CRDT, "since": 2, "epoch": epoch})
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(ws.recv(), 0.2)
        await _fail_and_recover(server, faults, writer)
        await _snapshot_then_the_next_op(ws, writer, 1)
    writer.close()


async def _read_sse(client: httpx.AsyncClient, events: asyncio.Queue[dict[str, Any]]) -> None:
    """Put each delta of the stream in ``events`` (the headers come with the
    first event: the handler answers once its start is decided); named events
    (``synced``, which ends the start) are left out."""
    async with client.stream("GET", EVENTS) as response:
        assert response.status_code == 200
        named = False
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                named = True
            elif line.startswith("data: ") and not named:
                events.put_nowait(dict(msgpack.unpackb(base64.b64decode(line[6:]))))
            elif not line:
                named = False


async def test_the_first_sse_snapshot_is_durable_state(
    gated: tuple[RunningServer, Faults],
) -> None:
    server, faults = gated
    writer, _ = await _writer_at_seq_1(server)
    await _hold_failing_op(faults, writer)
    events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    async with httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS) as client:
        reading = asyncio.create_task(_read_sse(client, events))
        try:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(events.get(), 0.2)  # nothing from the op in flight
            await _fail_and_recover(server, faults, writer)
            snapshot = await asyncio.wait_for(events.get(), WAIT_S)
            assert (snapshot["kind"], snapshot["seq"]) == ("snapshot", 1)
            assert (await _op(writer, "next", 1))["seq"] == 2
            delta = await asyncio.wait_for(events.get(), WAIT_S)
            assert (delta["kind"], delta["seq"]) == ("op", 2)
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
    writer.close()
