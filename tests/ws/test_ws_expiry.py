"""Expiry ends what a token holds open, over real sockets and real time: a
WebSocket's subscriptions (then the socket, 4401), a y-websocket connection
and a Hocuspocus socket (4401, or 4403 when only a rule expired)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgpack
import pytest
import websockets
from pycrdt import Doc, Text

from syncd.auth.permissions import Rule, V2Permissions
from syncd.ws.framing import CLOSE_READ_EXPIRED, CLOSE_TOKEN_EXPIRED
from syncd.yjs.protocol import sync_step1, sync_update
from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS
from tests.ws.support import NS, mint, op, open_ws, recv, recv_kind, send_json, send_mp
from tests.yjs.test_hocuspocus import auth, on

TTL_MS = 1500
"""A token or rule lifetime that a test waits out: short, yet long enough to
subscribe and see a delta first on a loaded machine."""

EARLY_S = 0.02
"""How much earlier than its expiry a close may seem to come: the test's
monotonic clock and the server's wall clock are read at different moments."""

WAIT_S = 5.0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _rules(*rules: Rule) -> V2Permissions:
    return V2Permissions(read=rules, write=(Rule("*"),))


async def _until_closed(ws: Any) -> list[Any]:
    """Every message until the server closes the socket."""
    messages: list[Any] = []
    with pytest.raises(websockets.ConnectionClosed):
        while True:
            messages.append(await asyncio.wait_for(ws.recv(), WAIT_S))
    return messages


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


async def _write(client: httpx.AsyncClient, crdt_id: str, body: Any, ns: str = NS) -> None:
    r = await client.post(
        f"/v1/namespaces/{ns}/crdts/{crdt_id}/ops", json=body, headers=ADMIN_HEADERS
    )
    assert r.status_code == 200, r.text


# -- the WebSocket ---------------------------------------------------------------


async def test_token_expiry_ends_each_subscription_then_closes_4401(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    started = time.monotonic()
    token = mint(ttl_ms=TTL_MS)
    async with open_ws(server, token) as ws:
        await send_mp(ws, {"kind": "subscribe", "id": "gc:a"})
        await recv_kind(ws, "snapshot")
        await send_json(ws, {"kind": "subscribe", "id": "gc:b"})
        await recv_kind(ws, "snapshot")
        skipped: list[dict[str, Any]] = []
        assert (await op(ws, "gc:a", {"op": "increment"}, skipped=skipped))["kind"] == "ack"
        delta = skipped[0] if skipped else await recv(ws)
        assert (delta["kind"], delta["id"], delta["seq"]) == ("op", "gc:a", 1)
        # Nothing more until the expiry: then an error for each subscription,
        # in its own encoding, and the close.
        rest = await _until_closed(ws)
        assert time.monotonic() - started >= TTL_MS / 1000 - EARLY_S
        assert ws.close_code == CLOSE_TOKEN_EXPIRED and ws.close_reason == "token expired"
        assert len(rest) == 2 and isinstance(rest[0], bytes) and isinstance(rest[1], str)
        errors = [_decoded(m) for m in rest]
        assert errors == [
            {"kind": "error", "id": crdt_id, "error": "token_expired", "message": "token expired"}
            for crdt_id in ("gc:a", "gc:b")
        ]
    await _write(client, "gc:a", {"op": "increment"})  # after the expiry: the socket is gone
    await _eventually(lambda: server.app.hub.count == 0)


async def test_a_connection_without_subscriptions_closes_at_expiry(
    server: RunningServer,
) -> None:
    async with open_ws(server, mint(ttl_ms=TTL_MS)) as ws:
        assert (await op(ws, "gc:w", {"op": "increment"}))["kind"] == "ack"
        assert await _until_closed(ws) == []
        assert ws.close_code == CLOSE_TOKEN_EXPIRED


async def test_a_rule_expiry_ends_only_the_subscriptions_it_granted(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    ends = _now_ms() + TTL_MS
    # gc:short is granted until `ends`; gc:both too, but then gc:b* takes over.
    permissions = _rules(
        Rule("gc:short", expires_at=ends),
        Rule("gc:both", expires_at=ends),
        Rule("gc:b*"),
        Rule("gc:long"),
    )
    async with open_ws(server, mint(permissions=permissions)) as ws:
        for crdt_id in ("gc:short", "gc:both", "gc:long"):
            await send_mp(ws, {"kind": "subscribe", "id": crdt_id})
            await recv_kind(ws, "snapshot")
        error = await asyncio.wait_for(recv(ws), TTL_MS / 1000 + WAIT_S)
        assert _now_ms() >= ends
        assert error["kind"] == "error" and error["id"] == "gc:short"
        assert error["error"] == "forbidden" and "expired" in error["message"]
        # Other tokens write to all three after the expiry: gc:short's delta
        # never comes (the pong would come after it), the others' do.
        for crdt_id in ("gc:short", "gc:both", "gc:long"):
            await _write(client, crdt_id, {"op": "increment"})
        got: list[str] = []
        while len(got) < 2:
            message = await recv(ws)
            assert message["kind"] == "op", message
            got.append(message["id"])
        await send_mp(ws, {"kind": "ping"})
        assert await recv(ws) == {"kind": "pong"}
        assert got == ["gc:both", "gc:long"]
        # The token is still good, and gc:short is refused from now on.
        await send_mp(ws, {"kind": "subscribe", "id": "gc:short"})
        refused = await recv(ws)
        assert (refused["kind"], refused["id"], refused["error"]) == (
            "error",
            "gc:short",
            "forbidden",
        )


def _decoded(message: Any) -> dict[str, Any]:
    result: dict[str, Any] = (
        msgpack.unpackb(message) if isinstance(message, bytes) else json.loads(message)
    )
    return result


async def _eventually(check: Any) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


# -- Yjs ---------------------------------------------------------------------------


def _update(text: str) -> bytes:
    doc: Doc[Any] = Doc()
    doc.get("content", type=Text).insert(0, text)
    return doc.get_update()


async def _yjs(server: RunningServer, token: str) -> Any:
    ws = await websockets.connect(
        f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/notes?token={token}"
    )
    await ws.send(sync_step1(b"\x00"))
    return ws


@pytest.mark.parametrize(
    ("permissions", "code", "reason"),
    [
        ("token", CLOSE_TOKEN_EXPIRED, "token expired"),
        ("rule", CLOSE_READ_EXPIRED, "read permission expired"),
    ],
)
async def test_a_yjs_connection_closes_when_its_read_ends(
    server: RunningServer, client: httpx.AsyncClient, permissions: str, code: int, reason: str
) -> None:
    started = time.monotonic()
    if permissions == "token":
        token = mint(ttl_ms=TTL_MS)
    else:
        token = mint(permissions=_rules(Rule("yd:notes", expires_at=_now_ms() + TTL_MS)))
    ws = await _yjs(server, token)
    messages = await _until_closed(ws)
    assert time.monotonic() - started >= TTL_MS / 1000 - EARLY_S
    assert ws.close_code == code and ws.close_reason == reason
    assert messages  # the sync before it: step 1 and step 2
    await _write(client, "yd:notes", {"op": "update", "update": _b64(_update("late"))})
    await _eventually(lambda: server.app.hub.count == 0)


async def test_a_hocuspocus_socket_closes_4401_when_a_documents_token_expires(
    server: RunningServer,
) -> None:
    started = time.monotonic()
    ws = await websockets.connect(f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/hocuspocus")
    await ws.send(auth("notes", mint(ttl_ms=TTL_MS)))
    await ws.send(auth("other", mint()))  # a token that lasts: the socket closes all the same
    await ws.send(on("notes", sync_update(_update("before"))))
    messages = await _until_closed(ws)
    assert time.monotonic() - started >= TTL_MS / 1000 - EARLY_S
    assert ws.close_code == CLOSE_TOKEN_EXPIRED
    # The update before the expiry was acknowledged as durable.
    assert any(m.endswith(b"\x08\x01") for m in messages if isinstance(m, bytes))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
