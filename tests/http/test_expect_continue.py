"""``Expect: 100-continue`` (RFC 9110 10.1.1): the 100 goes out only once the
request is routed, so a client waiting for it is told 404 or 405 at once
instead of uploading its whole body first; that answer closes the
connection (the body it may still send is read and discarded). A routed
request gets its 100, then its answer (both parsers). The token check
before the 100 is tested in test_expect_continue_auth.py."""

from __future__ import annotations

import asyncio
import json

from syncd.http.parser import CONTINUE
from syncd.http.parsers import make_parser
from syncd.http.request import Request
from tests.conftest import RunningServer, open_raw, read_response, read_until_closed
from tests.http.support import ADMIN_HEADERS

OPS = b"/v1/namespaces/app/crdts/gc:x/ops"
AUTH = ("Authorization: " + ADMIN_HEADERS["authorization"]).encode()


def _head(method: bytes, target: bytes, length: int) -> bytes:
    return (
        method
        + b" "
        + target
        + b" HTTP/1.1\r\nHost: t\r\n"
        + AUTH
        + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % length
        + b"Expect: 100-continue\r\n\r\n"
    )


async def test_an_unrouted_request_is_refused_before_its_100(server: RunningServer) -> None:
    for method, target, status in (
        (b"POST", b"/nowhere", 404),
        (b"POST", b"/health/live", 405),
        (b"PUT", OPS, 405),
    ):
        reader, writer = await open_raw(server.port)
        try:
            writer.write(_head(method, target, 100_000))
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
            assert head.split(b"\r\n")[0].split(b" ")[1] == b"%d" % status, (target, head)
            assert b"\r\nconnection: close\r\n" in head, head
            # The body it sends anyway is discarded; then the connection ends.
            writer.write(b"x" * 100_000)
            writer.write_eof()
            await read_until_closed(reader)
        finally:
            writer.close()


async def test_a_routed_request_gets_its_100_then_its_answer(server: RunningServer) -> None:
    body = json.dumps({"op": "increment"}).encode()
    reader, writer = await open_raw(server.port)
    try:
        writer.write(_head(b"POST", OPS, len(body)))
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(body)
        status, headers, answer = await read_response(reader)
        assert status == 200 and "connection" not in headers, answer
        # Kept alive: the next request on it is answered.
        writer.write(_head(b"POST", OPS, len(body)) + body)
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2) == interim
        assert (await read_response(reader))[0] == 200
    finally:
        writer.close()


def test_continue_head_is_the_request_of_each_continue(http_parser: str) -> None:
    """Pipelined requests that did not wait for their 100, read at once: each
    CONTINUE's head is its own request's, not the last one read."""
    parser = make_parser(http_parser, 1000)
    parser.feed(
        b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n{}"
        b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n{}"
    )
    for path in ("/a", "/b"):
        assert parser.next_event() is CONTINUE
        assert parser.continue_head().path == path
        request = parser.next_event()
        assert isinstance(request, Request) and request.path == path
        parser.start_next_cycle()
