"""Error answers say what to do about them: which setting, which namespace,
which types, which field (docs/http-api.md#status-codes)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import websockets

from syncd.auth.issue import issue_token
from syncd.auth.tokens import SigningKey
from tests.conftest import RunningServer
from tests.http.support import issue, op


async def test_a_mistyped_admin_secret_is_called_what_it_is(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post(
            "/v1/namespaces/app/tokens",
            json={"client_id": 1, "permissions": {"read": ["*"]}},
            headers={"authorization": "Bearer change-mee"},
        )
    assert r.status_code == 401 and r.json()["error"] == "invalid_token"
    assert r.json()["message"].startswith("the bearer is neither the admin secret nor a token")


async def test_a_token_of_another_key_hints_at_the_signing_key(server: RunningServer) -> None:
    other = issue_token(
        SigningKey(b"\x22" * 32),
        namespace="app",
        client_id=1,
        ttl_ms=60_000,
        permissions={"read": ["*"], "write": []},
        now_ms=int(time.time() * 1000),
    )
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.get(
            "/v1/namespaces/app/crdts/gc:a", headers={"authorization": f"Bearer {other}"}
        )
    assert r.status_code == 401 and r.json()["error"] == "invalid_token"
    assert "SERVICE_SIGNING_KEY" in r.json()["message"]


async def test_a_namespace_mismatch_names_both(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client, ns="app")
        r = await client.get("/v1/namespaces/shop/crdts/gc:a", headers=h)
    assert r.status_code == 403
    assert r.json()["message"] == "the token is for namespace 'app', not 'shop'"


async def test_413_names_the_limit_and_its_setting(make_server: Any) -> None:
    srv = await make_server(max_body_bytes=2048)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        h = await issue(client)
        r = await op(client, h, "or:a", {"op": "add", "element": "x" * 4096})
    assert r.status_code == 413 and r.json()["error"] == "payload_too_large"
    assert r.json()["message"] == "request body larger than 2048 bytes (SERVICE_MAX_BODY_BYTES)"


async def test_a_missing_op_says_it_is_missing(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        r = await op(client, h, "gc:a", {"amount": 2})
        assert r.status_code == 400 and r.json()["error"] == "invalid_op"
        assert r.json()["message"] == (
            "op: missing; every op names what it does in 'op' (a gcounter: increment)"
        )
        r = await op(client, h, "gc:a", [{"op": "increment"}, {"amount": 2}])
        assert r.json()["message"].startswith("ops[1].op: missing")
        r = await op(client, h, "plain", {"value": 1})
        assert r.json()["message"] == "op: missing; every op names what it does in 'op'"


async def test_an_unknown_type_lists_the_types_and_prefixes(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        for crdt_id, body in (
            ("zz:visits", {"op": "increment"}),
            ("visits", {"op": "increment", "type": "counter"}),
        ):
            r = await op(client, h, crdt_id, body)
            assert r.status_code == 400 and r.json()["error"] == "unknown_type"
            message = r.json()["message"]
            assert "the types are gcounter, pncounter, orset" in message, message
            assert "gc: (gcounter)" in message and "yd: (ydoc)" in message


async def test_the_websocket_says_the_same(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        token = (await issue(client))["authorization"].split()[1]
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/app/ws?token={token}"
    async with websockets.connect(url) as ws:
        await ws.send(json.dumps({"kind": "op", "id": "gc:a", "op": {"amount": 1}, "ref": 1}))
        reply = json.loads(await ws.recv())
        assert reply["error"] == "invalid_op" and reply["message"].startswith("op: missing")
        await ws.send(json.dumps({"kind": "op", "id": "zz:a", "op": {"op": "add"}, "ref": 2}))
        reply = json.loads(await ws.recv())
        assert reply["error"] == "unknown_type" and "gc: (gcounter)" in reply["message"]
