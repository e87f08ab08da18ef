"""A body far over the limit: the client sends all of it, then reads, and
gets the whole 413 (the lingering close reads and discards the rest, bounded
by time, not by a byte count that would end in a reset)."""

from __future__ import annotations

import asyncio
import json
import socket

from syncd.http.parser import body_too_large
from tests.conftest import RunningServer

UPLOAD_BYTES = 20 * 1024 * 1024
"""Twenty times the default SERVICE_MAX_BODY_BYTES."""
OPS = b"/v1/namespaces/app/crdts/gc:x/ops"


def upload_then_read(port: int, head: bytes, chunked: bool) -> bytes:
    """A plain blocking client: the head, UPLOAD_BYTES of body, a half-close,
    then everything it receives until the server closes."""
    piece = b"x" * (64 * 1024)
    if chunked:
        piece = b"%x\r\n" % len(piece) + piece + b"\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head)
        for _ in range(UPLOAD_BYTES // (64 * 1024)):
            sock.sendall(piece)
        sock.shutdown(socket.SHUT_WR)
        received = bytearray()
        while chunk := sock.recv(65536):
            received += chunk
        return bytes(received)


async def test_a_20_mb_body_gets_the_whole_413(server: RunningServer) -> None:
    limit = server.server.ctx.max_body
    assert limit * 16 < UPLOAD_BYTES
    expected = {"error": "payload_too_large", "message": body_too_large(limit)}
    for chunked in (False, True):
        framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % UPLOAD_BYTES
        head = b"POST " + OPS + b" HTTP/1.1\r\nHost: t\r\n" + framing + b"\r\n\r\n"
        # In a thread: the server runs on this loop.
        data = await asyncio.to_thread(upload_then_read, server.port, head, chunked)
        head_bytes, _, body = data.partition(b"\r\n\r\n")
        lines = head_bytes.decode("latin-1").split("\r\n")
        assert lines[0] == "HTTP/1.1 413 Request Entity Too Large", (chunked, data[:200])
        assert "connection: close" in lines
        assert f"content-length: {len(body)}" in lines  # all of it, and nothing after
        assert json.loads(body) == expected
    async with asyncio.timeout(2):  # closed at the client's EOF, not at a linger bound
        while server.server.ctx.connection_count:
            await asyncio.sleep(0.01)
