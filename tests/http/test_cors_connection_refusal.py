"""CORS on the 503 of a connection refused at accept (over
SERVICE_MAX_CONNECTIONS, or shutting down): with a CORS policy the answer
waits, briefly and within bounds, for the head of the request the client came
to send, and carries Access-Control-Allow-Origin for an allowed Origin in it,
so a browser page on that origin reads the 503 (and its Retry-After) instead
of a network error. Before, the 503 went out before anything was read, with
no CORS header. Another origin, none, a client that sends nothing (answered
once REFUSED_HEAD_WAIT_S is over) and refusals past MAX_REFUSED_LINGERING
(answered at once) get Vary: Origin alone; without a CORS policy the 503
goes out at once as before (both parsers, on a real socket)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from syncd.http import protocol
from tests.conftest import open_raw, read_response, read_until_closed

ORIGIN = "https://app.example"


def _request(origin: str | None) -> bytes:
    head = b"GET /v1/namespaces/app/crdts/gc:x HTTP/1.1\r\nHost: t\r\nAccept: */*\r\n"
    if origin is not None:
        head += b"Origin: " + origin.encode() + b"\r\n"
    return head + b"Cookie: " + b"c" * 2000 + b"\r\n\r\n"


async def _refused(port: int, pieces: list[bytes]) -> dict[str, str]:
    """The 503 to ``pieces`` (one write each), and that the connection ends."""
    reader, writer = await open_raw(port)
    try:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.02)
        status, headers, body = await asyncio.wait_for(read_response(reader), 5)
        assert status == 503, (status, body)
        assert json.loads(body)["error"] == "unavailable", body
        assert headers["connection"] == "close", headers
        writer.write_eof()
        assert await read_until_closed(reader) == b""
        return headers
    finally:
        writer.close()


async def _full_server(make_server: Any, **settings: Any) -> tuple[Any, Any]:
    srv = await make_server(max_connections=1, **settings)
    held = await open_raw(srv.port)
    await asyncio.sleep(0.05)
    return srv, held


async def test_a_refused_connections_503_carries_cors_for_an_allowed_origin(
    make_server: Any,
) -> None:
    srv, held = await _full_server(make_server, cors_origins=(ORIGIN,))
    request = _request(ORIGIN)
    cut = request.index(b"Origin") + 3
    for pieces in ([request], [request[:20], request[20:]], [request[:cut], request[cut:]]):
        headers = await _refused(srv.port, pieces)
        assert headers.get("access-control-allow-origin") == ORIGIN, headers
        assert headers.get("vary") == "Origin", headers
    for origin in ("https://evil.example", None):
        headers = await _refused(srv.port, [_request(origin)])
        assert "access-control-allow-origin" not in headers, (origin, headers)
        assert headers.get("vary") == "Origin", (origin, headers)
    held[1].close()
    await asyncio.wait_for(_no_refused_left(srv), 5)


async def test_a_silent_client_gets_its_503_once_the_wait_is_over(make_server: Any) -> None:
    srv, held = await _full_server(make_server, cors_origins=(ORIGIN,))
    reader, writer = await open_raw(srv.port)
    started = time.monotonic()
    status, headers, _ = await asyncio.wait_for(read_response(reader), 5)
    # Generous bounds: the answer neither came before the wait nor long after.
    assert status == 503 and time.monotonic() - started >= protocol.REFUSED_HEAD_WAIT_S * 0.8
    assert "access-control-allow-origin" not in headers and headers["vary"] == "Origin"
    writer.write_eof()
    assert await read_until_closed(reader) == b""
    writer.close()
    # One that closes its side without a word is answered then, not after the wait.
    reader, writer = await open_raw(srv.port)
    writer.write(_request(ORIGIN)[:30])
    writer.write_eof()
    status, headers, _ = await asyncio.wait_for(read_response(reader), 5)
    assert status == 503 and "access-control-allow-origin" not in headers
    writer.close()
    held[1].close()


async def test_waiting_refusals_are_bounded_by_the_lingering_cap(
    make_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_REFUSED_LINGERING connections waiting or lingering, a refused
    one is answered at once (Vary alone: its Origin is not waited for) and
    closed; the count goes back to 0."""
    monkeypatch.setattr(protocol, "MAX_REFUSED_LINGERING", 2)
    monkeypatch.setattr(protocol, "REFUSED_HEAD_WAIT_S", 60.0)  # no answer would come in time
    srv, held = await _full_server(make_server, cors_origins=(ORIGIN,))
    ctx = srv.app.server_ctx
    waiting = [await open_raw(srv.port) for _ in range(2)]
    await _until(lambda: ctx.refused_lingering == 2)
    reader, writer = await open_raw(srv.port)
    status, headers, _ = await asyncio.wait_for(read_response(reader), 10)
    assert status == 503
    assert "access-control-allow-origin" not in headers and headers["vary"] == "Origin"
    assert await read_until_closed(reader) == b""
    writer.close()
    for w_reader, w_writer in waiting:  # the waiting ones still read their Origin
        w_writer.write(_request(ORIGIN))
        status, headers, _ = await asyncio.wait_for(read_response(w_reader), 5)
        assert status == 503 and headers.get("access-control-allow-origin") == ORIGIN
        w_writer.write_eof()
        assert await read_until_closed(w_reader) == b""
        w_writer.close()
    await asyncio.wait_for(_no_refused_left(srv), 5)
    held[1].close()


async def test_without_a_cors_policy_the_503_goes_out_at_once(
    make_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(protocol, "REFUSED_HEAD_WAIT_S", 60.0)  # were it waited for
    srv, held = await _full_server(make_server)
    reader, writer = await open_raw(srv.port)
    status, headers, _ = await asyncio.wait_for(read_response(reader), 10)
    assert status == 503 and "vary" not in headers and "access-control-allow-origin" not in headers
    writer.close()
    held[1].close()


async def _until(check: Any) -> None:
    while not check():
        await asyncio.sleep(0.01)


async def _no_refused_left(srv: Any) -> None:
    await _until(lambda: srv.app.server_ctx.refused_lingering == 0)
