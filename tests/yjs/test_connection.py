"""The Yjs sockets on the WebSocket stack every socket runs on, over real
sockets: keepalive and the close handshake (y-websocket and Hocuspocus alike,
as for a native WebSocket), and a peer that stops reading: skipped, not read,
then the whole document once it drains."""

from __future__ import annotations

import asyncio
import base64
import socket
from typing import Any

import httpx
import pytest
from pycrdt import Doc, Text, handle_sync_message

from syncd.ws import base_connection
from syncd.yjs.connection import YjsConnection
from syncd.yjs.protocol import sync_update
from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS
from tests.ws.support import NS, WAIT_S, RawWs, client_frame, close_code, mint, wait_for

PATHS = {
    "y-websocket": "/v1/namespaces/{ns}/yjs/notes?token={token}",
    "hocuspocus": "/v1/namespaces/{ns}/hocuspocus",
}

BOUND = 4096
CHUNK = "x" * 65536
"""Each update's delta is far bigger than the bound: the kernel's socket
buffers (a few MB on loopback) fill within a few dozen updates."""
MAX_UPDATES = 1000
"""Far more than the kernel's socket buffers can swallow at 64 KB a delta."""


def _path(kind: str) -> str:
    return PATHS[kind].format(ns=NS, token=mint())


async def _control_frame(raw: RawWs) -> tuple[int, bytes]:
    """The next frame that is not a data frame (a Yjs socket opens with some)."""
    while True:
        opcode, payload = await raw.frame()
        if opcode >= 0x8:
            return opcode, payload


@pytest.mark.parametrize("kind", sorted(PATHS))
async def test_a_silent_yjs_peer_is_pinged_then_closed_1011(
    make_server: Any, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setattr(base_connection, "CLOSE_TIMEOUT_S", 0.2)
    srv = await make_server(ws_ping_s=0.3)
    loop = asyncio.get_running_loop()
    started = loop.time()
    raw = await RawWs.connect(srv, path=_path(kind))
    opcode, _ = await _control_frame(raw)
    assert opcode == 0x9 and 0.25 < loop.time() - started < 1.0  # a protocol ping
    opcode, payload = await _control_frame(raw)  # never answered
    assert (opcode, close_code(payload)) == (0x8, 1011)
    assert loop.time() - started > 0.55
    assert await raw.eof()  # and dropped after the close timeout
    raw.close()
    await wait_for(lambda: not srv.app.server_ctx.other_connections)


@pytest.mark.parametrize("kind", sorted(PATHS))
async def test_a_yjs_peer_that_talks_is_never_pinged(make_server: Any, kind: str) -> None:
    srv = await make_server(ws_ping_s=0.2)
    raw = await RawWs.connect(srv, path=_path(kind))
    # y-websocket's query-awareness; Hocuspocus's pong: each needs no answer.
    message = b"\x03" if kind == "y-websocket" else b"\x0a"
    for _ in range(8):
        raw.send(client_frame(0x2, message))
        await asyncio.sleep(0.1)
    raw.send(client_frame(0x8, (1000).to_bytes(2, "big")))
    opcode, payload = await _control_frame(raw)
    assert (opcode, close_code(payload)) == (0x8, 1000)  # the answer, not a ping
    assert await raw.eof()
    raw.close()


async def _stalled_peer(server: RunningServer, path: str) -> RawWs:
    sock = socket.socket()
    # A small receive window keeps the kernel from absorbing megabytes for us.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
    # A tiny stream limit: the client stops reading after ~2 KB until we read.
    reader, writer = await asyncio.open_connection(sock=sock, limit=1024)
    raw = RawWs(reader, writer)
    status, _ = await raw.handshake("", path=path)
    assert status == 101
    return raw


def _insert(doc: Doc[Any], text: str) -> bytes:
    updates: list[bytes] = []
    subscription = doc.observe(lambda event: updates.append(event.update))
    content = doc.get("content", type=Text)
    content.insert(len(str(content)), text)
    doc.unobserve(subscription)
    return b"".join(updates)


async def test_a_yjs_peer_that_stops_reading_is_skipped_not_read_then_gets_the_document(
    make_server: Any,
) -> None:
    server = await make_server(subscriber_buffer_bytes=BOUND)
    crdts = f"/v1/namespaces/{NS}/crdts/yd:notes"
    before = set(server.app.server_ctx.other_connections)
    stalled = await _stalled_peer(server, _path("y-websocket"))
    await wait_for(lambda: len(server.app.server_ctx.other_connections - before) == 1)
    (connection,) = server.app.server_ctx.other_connections - before
    assert isinstance(connection, YjsConnection)

    writer: Doc[Any] = Doc()
    writes = 0
    async with httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS) as client:
        while not connection.write_paused:
            writes += 1
            assert writes < MAX_UPDATES, "the stalled peer never fell behind"
            update = base64.b64encode(_insert(writer, CHUNK)).decode()
            r = await client.post(f"{crdts}/ops", json={"op": "update", "update": update})
            assert r.status_code == 200, r.text
        # The server holds no more than the bound plus one update's frame.
        held = connection.transport.get_write_buffer_size()
        assert held <= BOUND + len(CHUNK) + 200

        # What the stalled peer sends now is not read while it reads nothing.
        mine: Doc[Any] = Doc()
        stalled.send(client_frame(0x2, sync_update(_insert(mine, "mine"))))
        await asyncio.sleep(0.3)
        assert connection.session.inflight == 0
        r = await client.get(crdts, params={"root": "content"})
        assert "mine" not in r.json()["value"]

        # It reads again: whatever came before it fell behind, then the whole
        # document as one update; its own update is read and applied after.
        peer: Doc[Any] = Doc()
        expected = str(writer.get("content", type=Text))
        while len(str(peer.get("content", type=Text))) < len(expected):
            opcode, payload = await stalled.frame()
            if opcode == 0x2 and payload[0] == 0:  # a sync message
                handle_sync_message(payload[1:], peer)
        assert str(peer.get("content", type=Text)) == expected

        async def applied() -> bool:
            r = await client.get(crdts, params={"root": "content"})
            return "mine" in r.json()["value"]

        for _ in range(int(WAIT_S / 0.05)):
            if await applied():
                break
            await asyncio.sleep(0.05)
        assert await applied()
    stalled.close()
