"""Error bodies never carry stack traces or internals.

An internal error is forced for real: test routes whose handlers raise (at
once, after awaiting, or by returning something that is not a response) are
registered on an in-process server, and a WebSocket op is made to fail inside
the service. The client sees exactly the one internal body; the log keeps the
traceback for the operator.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from syncd.http.request import Request
from tests.conftest import RunningServer, open_raw, read_response
from tests.ws.support import op, open_ws

INTERNAL_BODY = {"error": "internal", "message": "internal error"}
SECRET_DETAIL = "db password is hunter2 at /srv/syncd/internal.py"
"""Text in the raised exception that must reach the log and never the client."""


def raising(request: Request) -> Any:
    raise RuntimeError(SECRET_DETAIL)


async def raising_later(request: Request) -> Any:
    raise KeyError(SECRET_DETAIL)


def not_a_response(request: Request) -> Any:
    return {"not": "a response"}  # awaited by the protocol: TypeError


@pytest.mark.parametrize("route", ["sync", "async", "shape"])
async def test_a_handler_that_raises_answers_the_one_internal_body(
    server: RunningServer, route: str, caplog: pytest.LogCaptureFixture
) -> None:
    handler = {"sync": raising, "async": raising_later, "shape": not_a_response}[route]
    server.app.router.add("GET", f"/test/{route}", handler)
    reader, writer = await open_raw(server.port)
    writer.write(f"GET /test/{route} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    with caplog.at_level(logging.ERROR, logger="syncd"):
        status, headers, body = await read_response(reader)
        # The connection serves on after an internal error.
        writer.write(b"GET /health/live HTTP/1.1\r\nHost: t\r\n\r\n")
        assert (await read_response(reader))[0] == 200
    writer.close()
    assert status == 500
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == INTERNAL_BODY
    assert body == b'{"error":"internal","message":"internal error"}'
    # The operator gets the details, with the traceback.
    logged = [r for r in caplog.records if r.exc_info]
    assert logged, "the internal error was not logged"
    if route != "shape":
        assert SECRET_DETAIL in caplog.text


async def test_a_websocket_op_that_fails_inside_answers_the_internal_error(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(SECRET_DETAIL)

    def broken_now(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(SECRET_DETAIL)

    # WebSocket ops of one read go through stage() and persist(), not apply_ops().
    server.app.service.apply_ops = broken  # type: ignore[method-assign]
    server.app.service.stage = broken_now  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="syncd"):
        async with open_ws(server) as ws:
            answer = await op(ws, "gc:x", {"op": "increment"}, ref="r1")
    assert answer == {"kind": "error", "ref": "r1", **INTERNAL_BODY}
    assert SECRET_DETAIL in caplog.text


@pytest.mark.parametrize(
    "raw",
    [
        b"GET /health/live?token=abc HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n",
        b"GET /x\x00y HTTP/1.1\r\nHost: t\r\n\r\n",
        b"POST /health/live HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40,  # a TLS hello
    ],
)
async def test_parse_errors_carry_no_internal_representations(
    server: RunningServer, raw: bytes
) -> None:
    """A malformed request's answer says what is wrong in words, without the
    parser's Python representation of the bytes (``bytearray(b'...')``)."""
    reader, writer = await open_raw(server.port)
    writer.write(raw)
    status, _, body = await read_response(reader)
    writer.close()
    assert 400 <= status < 500 or status in (501, 505)
    answer = json.loads(body)
    assert set(answer) == {"error", "message"}
    for internal in ("bytearray(", "b'", 'b"', "Traceback", "Error:", "\\x"):
        assert internal not in answer["message"], answer
