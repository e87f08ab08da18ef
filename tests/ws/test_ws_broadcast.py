"""Broadcast: a subscriber that stops reading is skipped, never waited for, and
resyncs with a fresh snapshot once it reads again."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack

from syncd.ws.connection import COALESCE_MAX_BYTES, WsConnection
from tests.conftest import RunningServer
from tests.ws.support import (
    WAIT_S,
    RawWs,
    op,
    open_ws,
    recv,
    recv_kind,
    send_json,
    send_mp,
    stalled_client,
    wait_for,
)

BOUND = 4096
VALUE = "v" * 8000
"""Each delta is bigger than the bound: a stalled reader falls behind fast."""
MAX_OPS = 2000
"""Far more than the kernel's socket buffers can swallow at ~8 KB a delta."""


def _session_of(server: RunningServer, before: set[Any]) -> WsConnection:
    (session,) = set(server.app.server_ctx.other_connections) - before
    assert isinstance(session, WsConnection)
    return session


async def test_stalled_subscriber_is_skipped_and_resyncs(make_server: Any) -> None:
    server = await make_server(subscriber_buffer_bytes=BOUND)
    async with open_ws(server) as writer, open_ws(server) as watcher:
        await send_mp(watcher, {"kind": "subscribe", "id": "lw:big"})
        await recv_kind(watcher, "snapshot")
        before = set(server.app.server_ctx.other_connections)
        stalled = await stalled_client(server)
        session = _session_of(server, before)
        stalled.send_message({"kind": "subscribe", "id": "lw:big"})
        await wait_for(lambda: "lw:big" in session.subscriptions)
        subscription = session.subscriptions["lw:big"]

        seq = 0
        while not subscription.lag:
            seq += 1
            assert seq < MAX_OPS, "the stalled subscriber never fell behind"
            ack = await op(writer, "lw:big", {"op": "set", "value": VALUE}, ref=seq)
            assert ack["seq"] == seq
        for _ in range(5):
            seq += 1
            await op(writer, "lw:big", {"op": "set", "value": VALUE}, ref=seq)
        # The server holds no more than the bound plus one coalesced write.
        held = session.transport.get_write_buffer_size()
        assert held <= BOUND + COALESCE_MAX_BYTES + len(VALUE) + 100
        # The watcher got every delta, in order, without waiting for the stalled one.
        seen = [(await recv_kind(watcher, "op"))["seq"] for _ in range(seq)]
        assert seen == list(range(1, seq + 1))

        # The stalled client reads again: deltas up to where it fell behind,
        # then a snapshot whose seq jumps past the ones it missed.
        frames = await _read_until_snapshot_at(stalled, seq)
        assert frames[0]["kind"] == "snapshot" and frames[0]["seq"] == 0
        # The start ends with synced; a resync's snapshot is no start: none after it.
        assert frames[1] == {
            "kind": "synced",
            "ns": "demo",
            "id": "lw:big",
            "seq": 0,
            "epoch": None,
        }
        assert all(f["kind"] != "synced" for f in frames[2:])
        frames = [frames[0], *frames[2:]]
        ops = [f["seq"] for f in frames[1:-1]]
        assert ops == list(range(1, len(ops) + 1))
        assert frames[-1]["seq"] > len(ops) + 1
        assert not subscription.lag
        # And it is live again.
        seq += 1
        await op(writer, "lw:big", {"op": "set", "value": "small"}, ref=seq)
        delta = msgpack.unpackb((await stalled.frame())[1])
        assert (delta["kind"], delta["seq"]) == ("op", seq)
        stalled.close()


async def _read_until_snapshot_at(raw: RawWs, seq: int) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    while True:
        opcode, payload = await asyncio.wait_for(raw.frame(), WAIT_S)
        assert opcode == 0x2
        frames.append(msgpack.unpackb(payload))
        if frames[-1]["kind"] == "snapshot" and frames[-1]["seq"] == seq:
            return frames


async def test_one_delta_many_subscribers_same_bytes(server: RunningServer) -> None:
    async with open_ws(server) as writer:
        clients = [open_ws(server) for _ in range(20)]
        sockets = [await c.__aenter__() for c in clients]
        try:
            for ws in sockets:
                await send_mp(ws, {"kind": "subscribe", "id": "gc:fan"})
                await recv(ws)
                assert (await recv(ws, synced=True))["kind"] == "synced"
            await op(writer, "gc:fan", {"op": "increment"})
            deltas = [await ws.recv() for ws in sockets]
            assert len(set(deltas)) == 1  # byte-identical frames for all
            assert msgpack.unpackb(deltas[0])["seq"] == 1
        finally:
            for c in clients:
                await c.__aexit__(None, None, None)


async def test_a_delta_one_encoding_cannot_carry_spares_the_others(
    server: RunningServer,
) -> None:
    async with open_ws(server) as text_client, open_ws(server) as binary_client:
        await send_json(text_client, {"kind": "subscribe", "id": "gc:odd"})
        await recv(text_client)
        await send_mp(binary_client, {"kind": "subscribe", "id": "gc:odd"})
        await recv(binary_client)
        # bytes: fine for msgpack, impossible in JSON (a bug elsewhere would do this)
        odd = {"kind": "op", "ns": "demo", "id": "gc:odd", "seq": 1, "epoch": "e", "op": b"\xff"}
        assert server.app.hub.publish(odd) == 2
        assert (await recv(binary_client))["op"] == b"\xff"
        await op(binary_client, "gc:odd", {"op": "increment"})  # a real op: seq 1 of a new life
        delta = await recv_kind(text_client, "op")
        assert delta["seq"] == 1 and delta["epoch"] != "e"
