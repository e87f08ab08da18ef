"""Revoking a token ends what it holds open, over real sockets: a WebSocket's
subscriptions (each gets ``token_revoked``, then the close 4401), a
y-websocket connection and a Hocuspocus socket (4401); other clients' go on,
and the token cannot open anything new (docs/permissions.md#revoking-tokens)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets
from websockets.exceptions import InvalidStatus

from syncd.auth.tokens import Claims, sign_claims
from syncd.ws.framing import CLOSE_TOKEN_EXPIRED
from syncd.yjs import hocuspocus
from syncd.yjs.protocol import sync_step1
from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS
from tests.ws.support import ALL, KEY, NS, open_ws, recv, recv_kind, send_json, send_mp
from tests.yjs.test_hocuspocus import auth

END_WITHIN_S = 1.0
"""What docs/permissions.md promises: what a revoked token holds open ends within a second."""

WAIT_S = 5.0

REVOKED = {"kind": "error", "error": "token_revoked", "message": "token revoked"}


def issued(client_id: int) -> str:
    """A token as the server issues them now: with ``issued_at``."""
    now = time.time_ns() // 1_000_000
    return sign_claims(Claims(NS, client_id, now + 3_600_000, ALL, issued_at=now), KEY)


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS) as c:
        yield c


async def _revoke(client: httpx.AsyncClient, client_id: int) -> float:
    """Revoke now; the monotonic time of the answer."""
    r = await client.post(f"/v1/namespaces/{NS}/revocations", json={"client_id": client_id})
    assert r.status_code == 200, r.text
    return time.monotonic()


async def _write(client: httpx.AsyncClient, crdt_id: str) -> None:
    r = await client.post(f"/v1/namespaces/{NS}/crdts/{crdt_id}/ops", json={"op": "increment"})
    assert r.status_code == 200, r.text


async def _until_closed(ws: Any, timeout: float = WAIT_S) -> list[Any]:
    messages: list[Any] = []
    with pytest.raises(websockets.ConnectionClosed):
        while True:
            messages.append(await asyncio.wait_for(ws.recv(), timeout))
    return messages


async def test_a_websocket_ends_each_subscription_then_closes_4401(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    token = issued(7)
    async with open_ws(server, token) as ws, open_ws(server, issued(8)) as other:
        await send_mp(ws, {"kind": "subscribe", "id": "gc:a"})
        await recv_kind(ws, "snapshot")
        await send_json(ws, {"kind": "subscribe", "id": "gc:b"})
        await recv_kind(ws, "snapshot")
        await send_mp(other, {"kind": "subscribe", "id": "gc:a"})
        await recv_kind(other, "snapshot")
        await _write(client, "gc:a")
        assert (await recv(ws))["seq"] == 1
        assert (await recv(other))["seq"] == 1

        answered = await _revoke(client, 7)
        errors = []
        for _ in range(2):
            errors.append(await asyncio.wait_for(recv(ws), END_WITHIN_S))
        assert sorted(errors, key=lambda e: e["id"]) == [
            {**REVOKED, "id": "gc:a"},
            {**REVOKED, "id": "gc:b"},
        ]
        assert await _until_closed(ws, END_WITHIN_S) == []
        assert time.monotonic() - answered < END_WITHIN_S
        assert ws.close_code == CLOSE_TOKEN_EXPIRED and ws.close_reason == "token revoked"

        # The other client's socket goes on.
        await _write(client, "gc:a")
        assert (await recv(other))["seq"] == 2

    # The revoked token opens nothing new.
    with pytest.raises(InvalidStatus) as refused:
        async with open_ws(server, token):
            pass
    assert refused.value.response.status_code == 401
    assert b"token_revoked" in refused.value.response.body


async def test_a_websocket_without_subscriptions_closes_too(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    async with open_ws(server, issued(7)) as ws:
        await send_mp(ws, {"kind": "ping"})
        assert await recv(ws) == {"kind": "pong"}
        answered = await _revoke(client, 7)
        assert await _until_closed(ws, END_WITHIN_S) == []
        assert time.monotonic() - answered < END_WITHIN_S
        assert ws.close_code == CLOSE_TOKEN_EXPIRED


async def test_a_yjs_connection_closes_4401(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/notes?token="
    token = issued(7)
    ws = await websockets.connect(url + token)
    other = await websockets.connect(url + issued(8))
    for socket in (ws, other):
        await socket.send(sync_step1(b"\x00"))
        await asyncio.wait_for(socket.recv(), WAIT_S)  # the sync has started
    answered = await _revoke(client, 7)
    await _until_closed(ws, END_WITHIN_S)
    assert time.monotonic() - answered < END_WITHIN_S
    assert ws.close_code == CLOSE_TOKEN_EXPIRED and ws.close_reason == "token revoked"
    # The other client's connection is open: it answers a ping.
    pong = await other.ping()
    await asyncio.wait_for(pong, WAIT_S)
    await other.close()
    with pytest.raises(InvalidStatus) as refused:
        await websockets.connect(url + token)
    assert refused.value.response.status_code == 401
    # A token issued to the client after the revocation connects.
    await asyncio.sleep(0.002)
    again = await websockets.connect(url + issued(7))
    await again.close()


async def test_a_hocuspocus_socket_closes_4401_when_one_documents_token_is_revoked(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    ws = await websockets.connect(f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/hocuspocus")
    await ws.send(auth("notes", issued(7)))
    await ws.send(auth("other", issued(8)))
    for name in ("notes", "other"):
        while True:
            got, kind, _ = hocuspocus.parse(await asyncio.wait_for(ws.recv(), WAIT_S))
            if got == name and kind == 2:  # authenticated
                break
    answered = await _revoke(client, 7)
    await _until_closed(ws, END_WITHIN_S)
    assert time.monotonic() - answered < END_WITHIN_S
    assert ws.close_code == CLOSE_TOKEN_EXPIRED and ws.close_reason == "token revoked"
