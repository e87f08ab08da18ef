"""CORS on the refusals the parsers make before routing: a body over
SERVICE_MAX_BODY_BYTES (413 payload_too_large) sent from an allowed origin is
answered with Access-Control-Allow-Origin and Vary: Origin, so a browser page
reads the 413 instead of a network error (both parsers; declared length and a
chunked body past the limit)."""

from __future__ import annotations

import json
from typing import Any

from tests.conftest import open_raw, read_response, read_until_closed

ORIGIN = "https://app.example"
OPS = b"/v1/namespaces/app/crdts/gc:x/ops"


def _head(origin: bytes | None, framing: bytes) -> bytes:
    head = b"POST " + OPS + b" HTTP/1.1\r\nHost: t\r\n" + framing + b"\r\n"
    if origin is not None:
        head += b"Origin: " + origin + b"\r\n"
    return head + b"\r\n"


async def _refusal(port: int, origin: bytes | None, chunked: bool) -> dict[str, str]:
    reader, writer = await open_raw(port)
    try:
        if chunked:
            body = b"x" * 2000
            writer.write(_head(origin, b"Transfer-Encoding: chunked") + b"7d0\r\n" + body + b"\r\n")
        else:
            writer.write(_head(origin, b"Content-Length: 2000"))
        status, headers, body = await read_response(reader)
        assert status == 413 and json.loads(body)["error"] == "payload_too_large", (status, body)
        assert headers["connection"] == "close"
        writer.write_eof()
        await read_until_closed(reader)
        return headers
    finally:
        writer.close()


async def test_a_413_to_an_allowed_origin_carries_cors_headers(make_server: Any) -> None:
    srv = await make_server(max_body_bytes=1000, cors_origins=(ORIGIN,))
    for chunked in (False, True):
        headers = await _refusal(srv.port, ORIGIN.encode(), chunked)
        assert headers.get("access-control-allow-origin") == ORIGIN, (chunked, headers)
        assert headers.get("vary") == "Origin", (chunked, headers)
        # Another origin, or none: Vary only, as on every other answer.
        for origin in (b"https://evil.example", None):
            headers = await _refusal(srv.port, origin, chunked)
            assert "access-control-allow-origin" not in headers, (chunked, origin, headers)
            assert headers.get("vary") == "Origin", (chunked, origin, headers)


async def test_without_a_cors_policy_a_413_has_no_cors_headers(make_server: Any) -> None:
    srv = await make_server(max_body_bytes=1000)
    for chunked in (False, True):
        headers = await _refusal(srv.port, ORIGIN.encode(), chunked)
        assert "access-control-allow-origin" not in headers and "vary" not in headers, headers
