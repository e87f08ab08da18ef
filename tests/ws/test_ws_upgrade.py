"""The upgrade: token placements, refusals as plain HTTP answers, connection limits."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgpack
import pytest
from websockets.exceptions import InvalidStatus

from syncd.auth.permissions import V2Permissions
from tests.conftest import ADMIN, RunningServer, open_raw, read_response
from tests.ws.support import RawWs, client_frame, mint, open_ws, recv, send_mp, wait_for

KEY_HEADER = b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"


def _upgrade_request(path: bytes) -> bytes:
    return (
        b"GET " + path + b" HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        + KEY_HEADER
        + b"Authorization: Bearer "
        + ADMIN.encode()
        + b"\r\n\r\n"
    )


async def _refused(server: RunningServer, token: str | None, **kw: Any) -> tuple[int, Any, Any]:
    with pytest.raises(InvalidStatus) as info:
        async with open_ws(server, token, **kw):
            pass
    response = info.value.response
    return response.status_code, json.loads(response.body), response.headers


async def test_token_in_query_and_in_header(server: RunningServer) -> None:
    token = mint()
    async with open_ws(server, token) as ws:
        await send_mp(ws, {"kind": "ping"})
        assert await recv(ws) == {"kind": "pong"}
    async with open_ws(server, None, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        await send_mp(ws, {"kind": "ping", "ref": "p"})
        assert await recv(ws) == {"kind": "pong", "ref": "p"}


async def test_refused_upgrades_are_http_errors(make_server: Any) -> None:
    server = await make_server(rate_limit=1)
    status, body, _ = await _refused(server, None)
    assert (status, body["error"]) == (401, "missing_token")
    status, body, _ = await _refused(server, "not.a-token")
    assert (status, body["error"]) == (401, "invalid_token")
    status, body, _ = await _refused(server, mint(ns="elsewhere"))
    assert (status, body["error"]) == (403, "forbidden")
    token = mint()
    async with open_ws(server, token):
        pass  # the one request this second allows
    status, body, headers = await _refused(server, token)
    assert (status, body["error"]) == (429, "rate_limited")
    assert int(headers["Retry-After"]) >= 1


async def test_rate_limit_of_a_v2_token_counts_the_upgrade(server: RunningServer) -> None:
    token = mint(permissions=V2Permissions(rate_limit=1))
    async with open_ws(server, token):
        pass
    status, body, _ = await _refused(server, token)
    assert (status, body["error"]) == (429, "rate_limited")


async def test_bad_namespace_is_400(server: RunningServer) -> None:
    reader, writer = await open_raw(server.port)
    writer.write(_upgrade_request(b"/v1/namespaces/..%2Fetc/ws"))
    status, _, body = await read_response(reader)
    assert (status, json.loads(body)["error"]) == (400, "invalid_namespace")
    writer.close()


@pytest.mark.parametrize(
    ("headers", "problem"),
    [
        (
            b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
            "Upgrade",
        ),
        (
            b"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
            "Connection",
        ),
        (
            b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 8\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
            "Version",
        ),
        (
            b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: c2hvcnQ=\r\n",
            "Key",
        ),
        (b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n", "Key"),
    ],
)
async def test_bad_handshake_headers_are_400(
    server: RunningServer, headers: bytes, problem: str
) -> None:
    reader, writer = await open_raw(server.port)
    writer.write(
        b"GET /v1/namespaces/demo/ws HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer "
        + ADMIN.encode()
        + b"\r\n"
        + headers
        + b"\r\n"
    )
    status, _, body = await read_response(reader)
    answer = json.loads(body)
    assert (status, answer["error"]) == (400, "bad_request")
    assert problem in answer["message"]
    writer.close()


async def test_frames_sent_with_the_upgrade_request_are_read(server: RunningServer) -> None:
    """Bytes behind the request in the same packet reach the session."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    raw = RawWs(reader, writer)
    status, head = await raw.handshake(ADMIN, client_frame(0x2, msgpack.packb({"kind": "ping"})))
    assert status == 101
    assert b"sec-websocket-accept:" in head.lower()
    opcode, payload = await raw.frame()
    assert (opcode, msgpack.unpackb(payload)) == (0x2, {"kind": "pong"})
    raw.close()


async def test_connection_limit_counts_websockets(make_server: Any) -> None:
    server = await make_server(max_connections=1)
    async with open_ws(server) as ws:
        await send_mp(ws, {"kind": "ping"})
        await recv(ws)
        assert len(server.app.server_ctx.other_connections) == 1
        # A raw client: the refusal may come before the request is even sent.
        reader, writer = await open_raw(server.port)
        writer.write(_upgrade_request(b"/v1/namespaces/demo/ws"))
        status, _, _ = await read_response(reader)
        assert status == 503
        writer.close()
    await wait_for(lambda: not server.app.server_ctx.other_connections)
    async with open_ws(server) as ws:  # the slot is free again
        await send_mp(ws, {"kind": "ping"})
        assert await recv(ws) == {"kind": "pong"}


async def test_upgrade_while_shutting_down_is_503(server: RunningServer) -> None:
    reader, writer = await open_raw(server.port)
    ctx = server.app.server_ctx
    await wait_for(lambda: bool(ctx.connections))  # accepted before the shutdown began
    ctx.closing = True
    writer.write(_upgrade_request(b"/v1/namespaces/demo/ws"))
    status, _, body = await read_response(reader)
    assert (status, json.loads(body)["error"]) == (503, "unavailable")
    writer.close()
