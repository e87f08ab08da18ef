"""Yjs peers on a real socket, one per protocol, for the tests that count a
peer's messages against its token's rate limit (a repeated sync step 1, a
query-awareness) and for those of a step 1 around a failed write: each joins
room :data:`ROOM` and hands the test a way to send a y-protocols message and
to await the next one it wants."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import websockets
from pycrdt import Decoder, Doc, Encoder, Text

from syncd.auth.permissions import Rule, V2Permissions
from syncd.wire import WS_OPCODE_BINARY
from syncd.yjs import hocuspocus
from syncd.yjs.connection import YjsConnection
from syncd.yjs.protocol import sync_step1
from tests.conftest import RunningServer
from tests.ws.support import NS, RawWs, client_frame, mint, wait_for

WAIT_S = 5.0
"""Upper bound on any one answer (a wait for the limit is about a second)."""

ROOM = "notes"

Send = Callable[[bytes], Awaitable[None]]
Receive = Callable[[], Awaitable[bytes]]
Wanted = Callable[[bytes], "bytes | None"]
"""A y-protocols message to what the test awaits of it; None: not that one."""


def limited(rate_limit: int) -> str:
    """A token that may read and write everything, at ``rate_limit`` per second."""
    everything = (Rule("*"),)
    return mint(permissions=V2Permissions(everything, everything, rate_limit=rate_limit))


def var_string(text: str) -> bytes:
    encoder = Encoder()
    encoder.write_var_string(text)
    return encoder.to_bytes()


@asynccontextmanager
async def y_websocket(
    server: RunningServer, token: str, wanted: Wanted
) -> AsyncIterator[tuple[Send, Receive]]:
    """A y-websocket peer (the upgrade counts once)."""
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/{ROOM}?token={token}"
    async with websockets.connect(url, ping_interval=None) as ws:

        async def receive() -> bytes:
            while True:
                message = await asyncio.wait_for(ws.recv(), WAIT_S)
                assert isinstance(message, bytes)
                got = wanted(message)
                if got is not None:
                    return got

        yield ws.send, receive


@asynccontextmanager
async def hocuspocus_peer(
    server: RunningServer, token: str, wanted: Wanted
) -> AsyncIterator[tuple[Send, Receive]]:
    """A Hocuspocus peer with one document authenticated (the auth counts
    once); its messages for that document are y-protocols messages after
    the document's name."""
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/hocuspocus"
    prefix = var_string(ROOM)
    async with websockets.connect(url, ping_interval=None) as ws:

        async def next_of(kind: int | None) -> tuple[int, bytes]:
            while True:
                data = await asyncio.wait_for(ws.recv(), WAIT_S)
                assert isinstance(data, bytes)
                name, got, rest = hocuspocus.parse(data)
                if name == ROOM and kind in (None, got):
                    return got, rest

        await ws.send(prefix + b"\x02\x00" + var_string(token) + var_string("3.4.4"))
        _, answer = await next_of(hocuspocus.MESSAGE_AUTH)
        assert answer[0] == hocuspocus.AUTH_AUTHENTICATED

        async def send(message: bytes) -> None:
            await ws.send(prefix + message)

        async def receive() -> bytes:
            while True:
                kind, rest = await next_of(None)
                got = wanted(bytes((kind,)) + rest)  # the kinds here are under 128: one byte
                if got is not None:
                    return got

        yield send, receive


def step2(message: bytes) -> bytes | None:
    """The update of a sync step 2; None for any other message."""
    if message[:2] != b"\x00\x01":
        return None
    return Decoder(message[2:]).read_message()


def text_of(update: bytes) -> str:
    doc: Doc[Any] = Doc()
    doc.apply_update(update)
    return str(doc.get("content", type=Text))


async def stalled_yjs_peer(server: RunningServer, token: str) -> tuple[RawWs, YjsConnection]:
    """A y-websocket peer of ROOM with small socket buffers on both ends (so
    the server cannot hand the kernel much), its step 1 sent, and the
    server's connection."""
    before = set(server.app.server_ctx.other_connections)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=1024)
    raw = RawWs(reader, writer)
    status, _ = await raw.handshake("", path=f"/v1/namespaces/{NS}/yjs/{ROOM}?token={token}")
    assert status == 101
    await wait_for(lambda: set(server.app.server_ctx.other_connections) - before)
    (connection,) = set(server.app.server_ctx.other_connections) - before
    assert isinstance(connection, YjsConnection)
    connection.transport.get_extra_info("socket").setsockopt(
        socket.SOL_SOCKET, socket.SO_SNDBUF, 4096
    )
    raw.send(client_frame(WS_OPCODE_BINARY, sync_step1(b"\x00")))
    return raw, connection
