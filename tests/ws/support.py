"""Helpers for the WebSocket tests: tokens, URLs, clients, and a raw frame client.

The raw client speaks RFC 6455 by hand (handshake, masked frames, frame
parsing) so tests can send what a well-behaved library never would.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import struct
import time
from typing import Any

import msgpack
from websockets.asyncio.client import ClientConnection, connect

from syncd.auth.permissions import Permissions, V1Permissions
from syncd.auth.tokens import Claims, SigningKey, sign_claims
from syncd.ws.connection import WsConnection
from tests.conftest import ADMIN, SIGNING_KEY_HEX, RunningServer

NS = "demo"
KEY = SigningKey(bytes.fromhex(SIGNING_KEY_HEX))
ALL = V1Permissions(read=("*",), write=("*",))
WAIT_S = 5.0
"""Upper bound on waiting for something the server does promptly."""


def mint(
    client_id: int = 7,
    permissions: Permissions = ALL,
    ns: str = NS,
    ttl_ms: int = 3_600_000,
) -> str:
    expires = time.time_ns() // 1_000_000 + ttl_ms
    return sign_claims(Claims(ns, client_id, expires, permissions), KEY)


def ws_url(server: RunningServer, token: str | None = None, ns: str = NS) -> str:
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{ns}/ws"
    return url if token is None else f"{url}?token={token}"


def open_ws(server: RunningServer, token: str | None = ADMIN, **kw: Any) -> Any:
    """``async with open_ws(server) as ws``: a websockets client, token in the query."""
    kw.setdefault("proxy", None)
    kw.setdefault("compression", None)
    kw.setdefault("ping_interval", None)
    return connect(ws_url(server, token), **kw)


async def send_mp(ws: ClientConnection, message: dict[str, Any]) -> None:
    await ws.send(msgpack.packb(message))


async def send_json(ws: ClientConnection, message: dict[str, Any]) -> None:
    await ws.send(json.dumps(message))


async def recv(ws: ClientConnection, *, synced: bool = False) -> dict[str, Any]:
    """The next message, msgpack or JSON alike. The ``synced`` message that
    ends each subscription's start is skipped unless ``synced`` (its own
    tests, tests/ws/test_ws_synced.py, look at it)."""
    while True:
        data = await asyncio.wait_for(ws.recv(), WAIT_S)
        result: dict[str, Any] = (
            msgpack.unpackb(data) if isinstance(data, bytes) else json.loads(data)
        )
        if synced or result.get("kind") != "synced":
            return result


async def recv_kind(ws: ClientConnection, kind: str) -> dict[str, Any]:
    """The next message of ``kind``, skipping others (deltas between replies)."""
    while True:
        message = await recv(ws)
        if message["kind"] == kind:
            return message


async def op(
    ws: ClientConnection,
    crdt_id: str,
    body: Any,
    ref: Any = 1,
    skipped: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Send an op message and return its ``ack`` or ``error``; other messages
    (deltas, which may come before the ack) go to ``skipped`` when given."""
    await send_mp(ws, {"kind": "op", "id": crdt_id, "op": body, "ref": ref})
    while True:
        message = await recv(ws)
        if message["kind"] in ("ack", "error") and message.get("ref") == ref:
            return message
        if skipped is not None:
            skipped.append(message)


async def wait_for(predicate: Any, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


# --- a raw client ----------------------------------------------------------


def client_frame(opcode: int, payload: bytes, *, mask: bool = True, fin: bool = True) -> bytes:
    """A client frame: masked as RFC 6455 requires unless told otherwise."""
    first = (0x80 if fin else 0) | opcode
    length = len(payload)
    mask_bit = 0x80 if mask else 0
    if length < 126:
        header = struct.pack("!BB", first, mask_bit | length)
    elif length < 65536:
        header = struct.pack("!BBH", first, mask_bit | 126, length)
    else:
        header = struct.pack("!BBQ", first, mask_bit | 127, length)
    if not mask:
        return header + payload
    key = os.urandom(4)
    masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return header + key + masked


def parse_frame(buffer: bytearray) -> tuple[int, bytes] | None:
    """The complete server frame at the front of ``buffer`` (consumed), as (opcode, payload)."""
    if len(buffer) < 2:
        return None
    opcode = buffer[0] & 0x0F
    length = buffer[1] & 0x7F
    offset = 2
    if length == 126:
        if len(buffer) < 4:
            return None
        (length,) = struct.unpack_from("!H", buffer, 2)
        offset = 4
    elif length == 127:
        if len(buffer) < 10:
            return None
        (length,) = struct.unpack_from("!Q", buffer, 2)
        offset = 10
    if len(buffer) < offset + length:
        return None
    payload = bytes(buffer[offset : offset + length])
    del buffer[: offset + length]
    return opcode, payload


class RawWs:
    """A hand-made WebSocket client over asyncio streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.buffer = bytearray()

    @classmethod
    async def connect(
        cls, server: RunningServer, token: str = ADMIN, *, path: str | None = None
    ) -> RawWs:
        """Connected and upgraded: to the native endpoint, or to ``path``."""
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        raw = cls(reader, writer)
        status, _ = await raw.handshake(token, path=path)
        assert status == 101
        return raw

    async def handshake(
        self, token: str, extra: bytes = b"", *, path: str | None = None
    ) -> tuple[int, bytes]:
        """Upgrade ``path`` (default: the native endpoint with ``token``)."""
        key = base64.b64encode(os.urandom(16))
        target = f"/v1/namespaces/{NS}/ws?token={token}" if path is None else path
        self.writer.write(
            b"GET " + target.encode() + b" HTTP/1.1\r\n"
            b"Host: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + b"\r\n\r\n" + extra
        )
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), WAIT_S)
        return int(head.split(b" ")[1]), head

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    def send_message(self, message: dict[str, Any]) -> None:
        self.writer.write(client_frame(0x2, msgpack.packb(message)))

    async def frame(self) -> tuple[int, bytes]:
        while True:
            frame = parse_frame(self.buffer)
            if frame is not None:
                return frame
            chunk = await asyncio.wait_for(self.reader.read(65536), WAIT_S)
            if not chunk:
                raise EOFError("connection closed")
            self.buffer += chunk

    async def eof(self) -> bool:
        """True once the server has closed the TCP connection."""
        while True:
            chunk = await asyncio.wait_for(self.reader.read(65536), WAIT_S)
            if not chunk:
                return True
            self.buffer += chunk

    def close(self) -> None:
        self.writer.close()


STALLED_BUFFER_BYTES = 4096
"""The stalled peer's receive buffer and the server's send buffer for it:
small, so the server's own queue fills after a few KB."""


async def stalled_client(server: RunningServer) -> RawWs:
    """An upgraded raw peer with a tiny receive window (the kernel would
    otherwise absorb megabytes for it) and a tiny stream limit (it stops
    reading after ~2 KB until the test reads)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, STALLED_BUFFER_BYTES)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=1024)
    raw = RawWs(reader, writer)
    status, _ = await raw.handshake(ADMIN)
    assert status == 101
    return raw


async def stalled_peer(server: RunningServer) -> tuple[RawWs, WsConnection]:
    """A raw peer with a tiny receive window that reads only when told, and
    the server's connection for it, its send buffer made small too: on
    loopback the kernel would take megabytes off the server's hands, and
    nothing would ever wait for the peer."""
    ctx = server.app.server_ctx
    assert ctx is not None
    before = set(ctx.other_connections)
    raw = await stalled_client(server)
    await wait_for(lambda: set(ctx.other_connections) - before)
    (connection,) = set(ctx.other_connections) - before
    assert isinstance(connection, WsConnection)
    connection.transport.get_extra_info("socket").setsockopt(
        socket.SOL_SOCKET, socket.SO_SNDBUF, STALLED_BUFFER_BYTES
    )
    return raw, connection


def subscribe_frames(crdt_ids: list[str], **fields: Any) -> bytes:
    """One binary ``subscribe`` frame per id (with ``fields`` added), to send
    in one write: the server reads them all at once."""
    return b"".join(
        client_frame(0x2, msgpack.packb({"kind": "subscribe", "id": crdt_id, **fields}))
        for crdt_id in crdt_ids
    )


def close_code(payload: bytes) -> int:
    code: int = struct.unpack("!H", payload[:2])[0]
    return code
