"""The WebSocket upgrade refuses ``?token=`` given twice with 400
``bad_request`` before any socket exists, as an ordinary HTTP error answer
like every refused upgrade: a proxy or log filter may have checked one copy
and the server used the other. A parameter it does not take may repeat."""

from __future__ import annotations

import json

import pytest

from tests.conftest import RunningServer, open_raw, read_response
from tests.ws.support import NS, mint, open_ws, recv, send_mp

KEY = "dGhlIHNhbXBsZSBub25jZQ=="


async def _upgrade(server: RunningServer, query: str, header: str = "") -> tuple[int, bytes]:
    reader, writer = await open_raw(server.port)
    writer.write(
        (
            f"GET /v1/namespaces/{NS}/ws?{query} HTTP/1.1\r\nHost: t\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            f"Sec-WebSocket-Key: {KEY}\r\n{header}\r\n"
        ).encode()
    )
    status, _, body = await read_response(reader)
    writer.close()
    return status, body


@pytest.mark.parametrize(
    "query",
    ["token={t}&token=bogus", "token=bogus&token={t}", "token={t}&token={t}"],
)
async def test_repeated_token_is_400_before_the_upgrade(server: RunningServer, query: str) -> None:
    status, body = await _upgrade(server, query.format(t=mint()))
    assert status == 400
    assert json.loads(body) == {
        "error": "bad_request",
        "message": "token: given more than once",
    }


async def test_repeated_token_is_400_beside_a_header(server: RunningServer) -> None:
    status, body = await _upgrade(server, "token=a&token=b", f"Authorization: Bearer {mint()}\r\n")
    assert (status, json.loads(body)["message"]) == (400, "token: given more than once")


async def test_one_token_and_repeated_unknown_parameters_connect(server: RunningServer) -> None:
    status, _ = await _upgrade(server, f"token={mint()}&_=1&_=2")
    assert status == 101
    async with open_ws(server, mint()) as ws:
        await send_mp(ws, {"kind": "ping"})
        assert await recv(ws) == {"kind": "pong"}
