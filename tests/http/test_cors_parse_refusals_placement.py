"""CORS on a parse refusal wherever the refused request's bytes sit in the
reads: pipelined behind earlier requests (its head starts inside a read, after
their bytes), with its Origin field in a later read than its head's start, or
both. Before, the Origin was looked for only in the read a request began at
the start of, so these refusals went without Access-Control-Allow-Origin and a
page on an allowed origin saw a network error. An earlier request's Origin is
never taken for the refused one's (both parsers, on a real socket)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.conftest import open_raw, read_response, read_until_closed

ORIGIN = b"https://app.example"
OPS = b"/v1/namespaces/app/crdts/gc:x/ops"

GET_LIVE = b"GET /health/live HTTP/1.1\r\nHost: t\r\n\r\n"
"""A request answered 200 that keeps the connection."""
POST_LIVE_BODY = b"POST /health/live HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
"""One answered 405 after its body is read (the connection goes on)."""
POST_LIVE_CHUNKED = (
    b"POST /health/live HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n0\r\n\r\n"
)

# (id, status, the refused request before its Origin line, after it)
REFUSED: list[tuple[str, int, bytes, bytes]] = [
    ("400 field line", 400, b"POST " + OPS + b" HTTP/1.1\r\nHost: t\r\n", b"No colon\r\n\r\n"),
    (
        "400 chunk line",
        400,
        b"POST " + OPS + b" HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n",
        b"\r\nzz\r\n",
    ),
    (
        "431 head",
        431,
        b"GET " + OPS + b" HTTP/1.1\r\nHost: t\r\n",
        b"X-Big: " + b"a" * 17_000 + b"\r\n\r\n",
    ),
    (
        "501 coding",
        501,
        b"POST " + OPS + b" HTTP/1.1\r\nHost: t\r\n",
        b"Transfer-Encoding: gzip\r\n\r\n",
    ),
]

BEFORE: list[tuple[str, bytes, list[int]]] = [
    ("none", b"", []),
    ("a GET", GET_LIVE, [200]),
    ("two GETs", GET_LIVE * 2, [200, 200]),
    ("a body", POST_LIVE_BODY, [405]),
    ("a chunked body", POST_LIVE_CHUNKED, [405]),
]


async def _pause() -> None:
    """Time for the server to read what was sent as a read of its own (on a
    loaded machine two writes may still come as one read: the case is then
    the unsplit one, which must pass as well)."""
    await asyncio.sleep(0.05)


async def _answers(port: int, pieces: list[bytes], statuses: list[int]) -> dict[str, str]:
    """Send ``pieces`` one write each; the answers to the requests before the
    refused one, then the refusal's headers (and that the connection ends)."""
    reader, writer = await open_raw(port)
    try:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await _pause()
        for status in statuses:
            got, _, body = await asyncio.wait_for(read_response(reader), 5)
            assert got == status, (got, body)
        got, headers, body = await asyncio.wait_for(read_response(reader), 5)
        assert json.loads(body)["message"], body
        assert headers["connection"] == "close", headers
        writer.write_eof()
        await read_until_closed(reader)
        headers["status"] = str(got)
        return headers
    finally:
        writer.close()


@pytest.mark.parametrize(
    ("before", "statuses"), [case[1:] for case in BEFORE], ids=[case[0] for case in BEFORE]
)
@pytest.mark.parametrize(
    ("status", "head", "rest"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED]
)
async def test_the_refused_requests_origin_is_found_across_reads_and_behind_others(
    make_server: Any, before: bytes, statuses: list[int], status: int, head: bytes, rest: bytes
) -> None:
    srv = await make_server(max_body_bytes=1000, cors_origins=(ORIGIN.decode(),))
    origin_line = b"Origin: " + ORIGIN + b"\r\n"
    splits = {
        # The refused request pipelined behind the others, all in one read.
        "one read": [before + head + origin_line + rest],
        # Its Origin line in a read after its head began.
        "origin later": [before + head, origin_line + rest],
        # Its head begins in a read of its own, cut inside its Origin line.
        "origin cut": [before, head + origin_line[:9], origin_line[9:] + rest],
    }
    for name, pieces in splits.items():
        headers = await _answers(srv.port, [p for p in pieces if p], statuses)
        assert headers["status"] == str(status), (name, headers)
        assert headers.get("access-control-allow-origin") == ORIGIN.decode(), (name, headers)
        assert headers.get("vary") == "Origin", (name, headers)


@pytest.mark.parametrize(
    ("status", "head", "rest"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED]
)
async def test_an_earlier_requests_origin_is_not_the_refused_ones(
    make_server: Any, status: int, head: bytes, rest: bytes
) -> None:
    """The requests before carry the allowed Origin, the refused one another
    or none: its answer has Vary alone."""
    srv = await make_server(max_body_bytes=1000, cors_origins=(ORIGIN.decode(),))
    allowed = GET_LIVE.replace(b"\r\n\r\n", b"\r\nOrigin: " + ORIGIN + b"\r\n\r\n")
    for own in (b"", b"Origin: https://evil.example\r\n"):
        for pieces in ([allowed + head + own + rest], [allowed + head, own + rest]):
            headers = await _answers(srv.port, [p for p in pieces if p], [200])
            assert headers["status"] == str(status), (own, headers)
            assert "access-control-allow-origin" not in headers, (own, headers)
            assert headers.get("vary") == "Origin", (own, headers)
