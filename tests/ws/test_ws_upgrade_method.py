"""Upgrade requests that are not a plain GET without a body: refused as HTTP, both parsers."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.conftest import ADMIN, RunningServer, open_raw, read_until_closed
from tests.ws.support import client_frame

HANDSHAKE = (
    b"Host: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer " + ADMIN.encode()
)
PATHS = [
    b"/v1/namespaces/demo/ws",
    b"/v1/namespaces/demo/yjs/room",
    b"/v1/namespaces/demo/hocuspocus",
]


async def _answer(server: RunningServer, request: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await open_raw(server.port)
    writer.write(request)
    data = await read_until_closed(reader, timeout=5)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return int(lines[0].split()[1]), headers, body


@pytest.mark.parametrize("path", PATHS)
async def test_head_upgrade_is_refused(server: RunningServer, path: bytes) -> None:
    """RFC 6455 4.1: the opening handshake is a GET. The router serves HEAD with
    the GET handler; a HEAD must not switch the connection to a WebSocket."""
    status, headers, body = await _answer(
        server, b"HEAD " + path + b" HTTP/1.1\r\n" + HANDSHAKE + b"\r\n\r\n"
    )
    assert status == 400
    assert body == b""  # a HEAD answer's head only
    assert "upgrade" not in headers


@pytest.mark.parametrize("path", PATHS)
async def test_upgrade_with_a_body_is_refused(server: RunningServer, path: bytes) -> None:
    """A body belongs to the HTTP request, before any switch (RFC 9110 7.8): h11
    read it as one, llhttp handed it to the WebSocket as frames. Both refuse it."""
    status, _, body = await _answer(
        server,
        b"GET " + path + b" HTTP/1.1\r\n" + HANDSHAKE + b"\r\nContent-Length: 5\r\n\r\nhello",
    )
    assert status == 400
    assert json.loads(body)["error"] == "bad_request"


async def test_frames_after_an_upgrade_pipelined_behind_a_request_are_read(
    server: RunningServer,
) -> None:
    """A WebSocket upgrade pipelined behind another request, with a first frame
    in the same write. With httptools, answering the first request re-parsed
    the bytes after the upgrade request as HTTP, before the upgrade had been
    answered: the frame was lost (no pong), the socket opened regardless."""
    reader, writer = await open_raw(server.port)
    writer.write(
        b"GET /health/live HTTP/1.1\r\nHost: t\r\n\r\n"
        + b"GET /v1/namespaces/demo/ws HTTP/1.1\r\n"
        + HANDSHAKE
        + b"\r\n\r\n"
        + client_frame(0x9, b"hi")
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200 ")
    await asyncio.wait_for(reader.readuntil(b'"live"}'), 5)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 101 "), head
    pong = await asyncio.wait_for(reader.readexactly(4), 5)
    assert pong == b"\x8a\x02hi"
    writer.close()
