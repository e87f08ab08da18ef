"""Limits and closing: 1009, 1002, the close handshake, shutdown, presence leaves, gauges."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import pytest
from websockets.exceptions import ConnectionClosed

from syncd.ws import base_connection
from tests.conftest import RunningServer
from tests.ws.support import (
    RawWs,
    client_frame,
    close_code,
    mint,
    op,
    open_ws,
    recv,
    recv_kind,
    send_mp,
    wait_for,
)


def _gauge(server: RunningServer, name: str) -> float:
    value: float = getattr(server.app.metrics, name)._value.get()
    return value


async def test_message_over_the_body_limit_closes_1009(make_server: Any) -> None:
    limit = 1024
    server = await make_server(max_body_bytes=limit)
    # A message of exactly the limit is fine.
    padding = limit - len(msgpack.packb({"kind": "ping", "pad": ""})) - 2
    exact = msgpack.packb({"kind": "ping", "pad": "x" * padding})
    assert len(exact) == limit
    async with open_ws(server) as ws:
        await ws.send(exact)
        assert await recv(ws) == {"kind": "pong"}
        await ws.send(exact + b"\x00")  # one byte over (garbage, but never parsed)
        with pytest.raises(ConnectionClosed) as info:
            await recv(ws)
        assert info.value.rcvd is not None and info.value.rcvd.code == 1009


async def test_fragmented_message_is_counted_as_a_whole(make_server: Any) -> None:
    server = await make_server(max_body_bytes=1024)
    raw = await RawWs.connect(server)
    # Three fragments of 400 bytes: each small, together over the limit.
    raw.send(client_frame(0x2, b"a" * 400, fin=False))
    raw.send(client_frame(0x0, b"b" * 400, fin=False))
    raw.send(client_frame(0x0, b"c" * 400, fin=True))
    opcode, payload = await raw.frame()
    assert (opcode, close_code(payload)) == (0x8, 1009)
    # We answer the server's close; it then drops the connection.
    raw.send(client_frame(0x8, payload[:2]))
    assert await raw.eof()
    raw.close()


async def test_fragmented_message_within_the_limit_is_reassembled(server: RunningServer) -> None:
    raw = await RawWs.connect(server)
    data = msgpack.packb({"kind": "ping", "ref": "frag"})
    raw.send(client_frame(0x2, data[:3], fin=False))
    raw.send(client_frame(0x9, b"hb"))  # a ping between fragments is allowed
    raw.send(client_frame(0x0, data[3:], fin=True))
    assert await raw.frame() == (0xA, b"hb")
    opcode, payload = await raw.frame()
    assert (opcode, msgpack.unpackb(payload)) == (0x2, {"kind": "pong", "ref": "frag"})
    raw.close()


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (client_frame(0x2, msgpack.packb({"kind": "ping"}), mask=False), 1002),  # unmasked
        (client_frame(0x3, b"x"), 1002),  # reserved opcode
        (client_frame(0x0, b"x"), 1002),  # continuation with nothing to continue
        (bytes([0x82 | 0x40]) + client_frame(0x2, b"x")[1:], 1002),  # RSV1 without extension
        (client_frame(0x1, b"\xff\xfe"), 1007),  # text that is not UTF-8
    ],
    # Named, not shown: the masks are random, and test ids must be the same in
    # every collection (parallel workers each collect the suite).
    ids=["unmasked", "reserved-opcode", "lone-continuation", "rsv1", "bad-utf8"],
)
async def test_protocol_violation_closes(server: RunningServer, frame: bytes, code: int) -> None:
    raw = await RawWs.connect(server)
    raw.send(frame)
    opcode, payload = await raw.frame()
    assert (opcode, close_code(payload)) == (0x8, code)
    assert await raw.eof()  # no waiting for our close: the stream is beyond repair
    raw.close()
    await wait_for(lambda: not server.app.server_ctx.other_connections)


async def test_peer_close_is_answered_then_the_transport_closes(server: RunningServer) -> None:
    raw = await RawWs.connect(server)
    raw.send(client_frame(0x8, (4000).to_bytes(2, "big") + b"bye"))
    raw.send_message({"kind": "ping"})  # after our close: ignored
    opcode, payload = await raw.frame()
    assert (opcode, close_code(payload)) == (0x8, 4000)
    assert await raw.eof()
    assert not raw.buffer  # nothing but the close frame was sent
    raw.close()


async def test_server_close_waits_for_the_peer_then_times_out(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base_connection, "CLOSE_TIMEOUT_S", 0.2)
    raw = await RawWs.connect(server)
    raw.send_message({"kind": "ping"})
    assert (await raw.frame())[0] == 0x2
    (session,) = server.app.server_ctx.other_connections
    session.shutdown()
    opcode, payload = await raw.frame()
    assert (opcode, close_code(payload)) == (0x8, 1001)
    assert not session.transport.is_closing()  # waiting for our close frame
    # We never answer: the server drops the connection after its timeout.
    assert await raw.eof()
    raw.close()


async def test_server_shutdown_closes_sockets_with_1001(make_server: Any) -> None:
    server = await make_server()
    async with open_ws(server) as a, open_ws(server) as b:
        await send_mp(a, {"kind": "subscribe", "id": "gc:s"})
        await recv(a)
        await server.server.shutdown()
        for ws in (a, b):
            with pytest.raises(ConnectionClosed) as info:
                await recv(ws)
            assert info.value.rcvd is not None and info.value.rcvd.code == 1001
    await wait_for(lambda: not server.app.server_ctx.other_connections)


async def test_presence_leaves_when_the_connection_closes(server: RunningServer) -> None:
    async with open_ws(server, mint(client_id=1)) as watcher:
        await send_mp(watcher, {"kind": "subscribe", "id": "pr:room"})
        await recv_kind(watcher, "snapshot")
        async with open_ws(server, mint(client_id=2)) as member:
            answer = await op(member, "pr:room", {"op": "update", "data": {"cursor": 3}})
            assert answer["kind"] == "ack"
            delta = await recv_kind(watcher, "op")
            assert (delta["op"]["op"], delta["client_id"]) == ("update", 2)
        delta = await recv_kind(watcher, "op")
        assert (delta["op"]["op"], delta["client_id"]) == ("leave", 2)
    # Durable and visible: the entry is gone from the state.
    view = server.app.engine.read("demo", "pr:room")
    assert view is not None and view["value"] == {}


async def test_presence_left_explicitly_is_not_left_again(server: RunningServer) -> None:
    async with open_ws(server, mint(client_id=2)) as member:
        await op(member, "pr:lobby", {"op": "update"}, ref=1)
        await op(member, "pr:lobby", {"op": "leave"}, ref=2)
        await op(member, "pr:hall", {"op": "update"}, ref=3)
    await wait_for(lambda: _seq(server, "pr:hall") == 2)
    await asyncio.sleep(0.05)
    assert _seq(server, "pr:lobby") == 2  # no second leave


def _seq(server: RunningServer, crdt_id: str) -> int:
    entry = server.app.engine.get("demo", crdt_id)
    return 0 if entry is None else entry.seq


async def test_gauges_move_up_and_down_exactly(server: RunningServer) -> None:
    assert _gauge(server, "ws_connections_active") == 0
    async with open_ws(server) as a, open_ws(server) as b:
        assert _gauge(server, "ws_connections_active") == 2
        for crdt_id in ("gc:1", "gc:2"):
            await send_mp(a, {"kind": "subscribe", "id": crdt_id})
            await recv(a)
        await send_mp(a, {"kind": "subscribe", "id": "gc:1"})  # again: still one
        await recv(a)
        await send_mp(b, {"kind": "subscribe", "id": "gc:1"})
        await recv(b)
        assert _gauge(server, "subscriptions_active") == 3
        await send_mp(a, {"kind": "unsubscribe", "id": "gc:2"})
        await send_mp(a, {"kind": "ping"})
        await recv(a)
        assert _gauge(server, "subscriptions_active") == 2
    await wait_for(lambda: _gauge(server, "ws_connections_active") == 0)
    assert _gauge(server, "subscriptions_active") == 0
    # An abrupt drop (no close frame) counts down too.
    raw = await RawWs.connect(server)
    raw.send_message({"kind": "subscribe", "id": "gc:1"})
    await raw.frame()
    assert _gauge(server, "subscriptions_active") == 1
    raw.writer.transport.abort()
    await wait_for(lambda: _gauge(server, "ws_connections_active") == 0)
    assert _gauge(server, "subscriptions_active") == 0
    assert server.app.hub.count == 0


async def test_a_silent_peer_is_pinged_then_closed_1011(
    make_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base_connection, "CLOSE_TIMEOUT_S", 0.2)
    srv = await make_server(ws_ping_s=0.3)
    raw = await RawWs.connect(srv)
    started = asyncio.get_running_loop().time()
    opcode, _ = await raw.frame()
    pinged_after = asyncio.get_running_loop().time() - started
    assert opcode == 0x9 and 0.25 < pinged_after < 1.0  # a protocol ping
    opcode, payload = await raw.frame()  # never answered
    assert (opcode, close_code(payload)) == (0x8, 1011)
    assert asyncio.get_running_loop().time() - started > 0.55
    assert await raw.eof()  # and dropped after the close timeout
    raw.close()


async def test_a_peer_that_answers_pings_or_talks_stays(make_server: Any) -> None:
    srv = await make_server(ws_ping_s=0.2)
    # websockets answers protocol pings itself (its own pings are off here)
    async with open_ws(srv) as ws:
        await asyncio.sleep(1.0)  # five ping intervals of silence from the app
        await send_mp(ws, {"kind": "ping", "ref": 1})
        assert (await recv(ws))["kind"] == "pong"
    # a raw client that never answers a ping but keeps sending is never pinged
    raw = await RawWs.connect(srv)
    for _ in range(8):
        raw.send_message({"kind": "ping"})
        assert (await raw.frame())[0] == 0x2  # only pongs of ours, no ping frame
        await asyncio.sleep(0.1)
    raw.close()


async def test_a_stalled_loop_is_not_taken_for_a_silent_peer(make_server: Any) -> None:
    srv = await make_server(ws_ping_s=0.2)
    raw = await RawWs.connect(srv)
    assert (await raw.frame())[0] == 0x9  # the server's ping, unanswered
    (session,) = srv.app.server_ctx.other_connections
    session._stop_keepalive()
    now = asyncio.get_running_loop().time()
    # The check comes half a second late (the loop was busy): not a verdict yet.
    session._keepalive_due = now - 0.5
    session._on_keepalive()
    assert session.can_send and session._keepalive is not None
    # On time and still nothing since the ping: closed with 1011.
    session._stop_keepalive()
    session._keepalive_due = asyncio.get_running_loop().time()
    session._on_keepalive()
    opcode, payload = await raw.frame()
    assert (opcode, close_code(payload)) == (0x8, 1011)
    raw.close()
