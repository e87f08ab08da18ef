"""CORS on every refusal the parsers make before routing, not only on a 413:
a request from an allowed origin answered 400 (a malformed head or chunked
body), 431 (a head too large), 501 (an unknown method or transfer coding) or
505 (an HTTP version not taken) carries Access-Control-Allow-Origin and Vary:
Origin like any other answer, so a browser page reads the JSON error instead
of an opaque network error (both parsers, on a real socket). The Origin is
read from the refused head's raw bytes where it is one whole, well-formed
field line; another origin, none, or two Origin lines get Vary alone."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import open_raw, read_response, read_until_closed

ORIGIN = "https://app.example"
OPS = b"/v1/namespaces/app/crdts/gc:x/ops"
BIG_FIELD = b"X-Big: " + b"a" * 17_000 + b"\r\n"

# (id, status, request line, fields after Origin, what follows the head)
CASES: list[tuple[str, int, bytes, bytes, bytes]] = [
    ("400 field line", 400, b"POST " + OPS + b" HTTP/1.1", b"No colon here\r\n", b""),
    ("400 target", 400, b"GET /a b c HTTP/1.1", b"", b""),
    (
        "400 chunk line",
        400,
        b"POST " + OPS + b" HTTP/1.1",
        b"Transfer-Encoding: chunked\r\n",
        b"zz\r\n",
    ),
    ("413 length", 413, b"POST " + OPS + b" HTTP/1.1", b"Content-Length: 2000\r\n", b""),
    ("431 head", 431, b"GET " + OPS + b" HTTP/1.1", BIG_FIELD, b""),
    ("501 method", 501, b"FROB " + OPS + b" HTTP/1.1", b"", b""),
    ("501 coding", 501, b"POST " + OPS + b" HTTP/1.1", b"Transfer-Encoding: gzip\r\n", b""),
    ("505 version", 505, b"GET " + OPS + b" HTTP/3.0", b"", b""),
]


def _request(line: bytes, origins: list[bytes], fields: bytes, after: bytes) -> bytes:
    head = line + b"\r\nHost: t\r\n"
    for origin in origins:
        head += b"Origin: " + origin + b"\r\n"
    return head + fields + b"\r\n" + after


async def _refusal(port: int, status: int, request: bytes) -> dict[str, str]:
    reader, writer = await open_raw(port)
    try:
        writer.write(request)
        got, headers, body = await read_response(reader)
        assert got == status, (got, body)
        assert json.loads(body)["message"], body
        assert headers["connection"] == "close", headers
        writer.write_eof()
        await read_until_closed(reader)
        return headers
    finally:
        writer.close()


@pytest.mark.parametrize(
    ("status", "line", "fields", "after"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
async def test_a_parse_refusal_to_an_allowed_origin_carries_cors_headers(
    make_server: Any, status: int, line: bytes, fields: bytes, after: bytes
) -> None:
    srv = await make_server(max_body_bytes=1000, cors_origins=(ORIGIN,))
    headers = await _refusal(srv.port, status, _request(line, [ORIGIN.encode()], fields, after))
    assert headers.get("access-control-allow-origin") == ORIGIN, headers
    assert headers.get("vary") == "Origin", headers
    # Another origin, none, or two (which is meant is unknown): Vary alone.
    for origins in ([b"https://evil.example"], [], [ORIGIN.encode(), b"https://evil.example"]):
        headers = await _refusal(srv.port, status, _request(line, origins, fields, after))
        assert "access-control-allow-origin" not in headers, (origins, headers)
        assert headers.get("vary") == "Origin", (origins, headers)


async def test_any_origin_policy_answers_a_parse_refusal_with_a_star(make_server: Any) -> None:
    srv = await make_server(cors_origins=("*",))
    request = _request(b"FROB / HTTP/1.1", [ORIGIN.encode()], b"", b"")
    headers = await _refusal(srv.port, 501, request)
    assert headers.get("access-control-allow-origin") == "*", headers


async def test_without_a_cors_policy_a_parse_refusal_has_no_cors_headers(
    make_server: Any,
) -> None:
    srv = await make_server()
    request = _request(b"FROB / HTTP/1.1", [ORIGIN.encode()], b"", b"")
    headers = await _refusal(srv.port, 501, request)
    assert "access-control-allow-origin" not in headers and "vary" not in headers, headers
