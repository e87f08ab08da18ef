"""Webhooks through the real server: ops over HTTP and WebSocket reach a real receiver."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import msgpack
from websockets.asyncio.client import connect

from tests.conftest import ADMIN
from tests.http.support import issue, op
from tests.webhooks.webhook_receiver import Receiver

SECRET = "hook-secret"


async def test_http_and_ws_ops_are_delivered_signed(make_server: Any, make_receiver: Any) -> None:
    receiver: Receiver = await make_receiver(secret=SECRET)
    srv = await make_server(webhook_url=receiver.url, webhook_secret=SECRET)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        h = await issue(client, client_id=9)
        r = await op(client, h, "gc:hits", {"op": "increment", "amount": 2})
        assert r.status_code == 200
        await receiver.wait_for(1)
        token = h["authorization"].split()[1]
        url = f"ws://127.0.0.1:{srv.port}/v1/namespaces/app/ws?token={token}"
        async with connect(url, proxy=None, compression=None, ping_interval=None) as ws:
            await ws.send(
                msgpack.packb(
                    {"kind": "op", "id": "or:s", "ref": 1, "op": {"op": "add", "element": "x"}}
                )
            )
            ack = msgpack.unpackb(await asyncio.wait_for(ws.recv(), 5))
            assert ack["kind"] == "ack"
        await receiver.wait_for(2)
    first, second = (req.json() for req in receiver.requests)
    assert all(req.signature_ok for req in receiver.requests)
    assert all(req.header("content-type") == "application/json" for req in receiver.requests)
    assert first["ns"] == "app" and first["crdt_id"] == "gc:hits" and first["source"] == "http"
    assert first["seq"] == 1 and first["op_type"] == "increment" and first["client_id"] == 9
    assert isinstance(first["timestamp_ms"], int) and isinstance(first["event_id"], str)
    assert second["crdt_id"] == "or:s" and second["source"] == "ws" and second["op_type"] == "add"
    assert first["event_id"] != second["event_id"]


async def test_an_ops_origin_is_in_its_event_and_a_reverts_too(
    make_server: Any, make_receiver: Any
) -> None:
    """An op's origin (its own, its batch's, its WebSocket message's, up to
    the 128 characters of ORIGIN_MAX_LEN) is in its signed event; an op
    without one has no ``origin`` field; a revert's ops carry ``revert``."""
    from syncd.crdt.validate import ORIGIN_MAX_LEN
    from syncd.revert import REVERT_ORIGIN

    longest = "agent:" + "x" * (ORIGIN_MAX_LEN - len("agent:"))
    receiver: Receiver = await make_receiver(secret=SECRET)
    srv = await make_server(webhook_url=receiver.url, webhook_secret=SECRET)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        human, agent = await issue(client, client_id=7), await issue(client, client_id=9)
        insert = {"op": "insert", "index": 0, "text": "hi"}
        assert (await op(client, human, "rg:doc", insert)).status_code == 200
        r = await op(client, agent, "rg:doc", insert, query="?origin=agent:t1")
        assert r.status_code == 200, r.text
        r = await op(client, agent, "rg:doc", {**insert, "origin": longest})
        assert r.status_code == 200, r.text
        token = agent["authorization"].split()[1]
        url = f"ws://127.0.0.1:{srv.port}/v1/namespaces/app/ws?token={token}"
        async with connect(url, proxy=None, compression=None, ping_interval=None) as ws:
            message = {"kind": "op", "id": "rg:doc", "ref": 1, "op": insert, "origin": "agent:ws"}
            await ws.send(msgpack.packb(message))
            assert msgpack.unpackb(await asyncio.wait_for(ws.recv(), 5))["kind"] == "ack"
        await receiver.wait_for(4)
        r = await client.post(
            "/v1/namespaces/app/crdts/rg:doc/revert", json={"origin": "agent:t1"}, headers=human
        )
        assert r.status_code == 200 and r.json()["applied"] == 1, r.text
        await receiver.wait_for(5)
    assert all(req.signature_ok for req in receiver.requests)
    events = sorted((req.json() for req in receiver.requests), key=lambda e: e["seq"])
    assert [(e["seq"], e.get("origin"), e["client_id"]) for e in events] == [
        (1, None, 7),
        (2, "agent:t1", 9),
        (3, longest, 9),
        (4, "agent:ws", 9),
        (5, REVERT_ORIGIN, 7),
    ]
    assert "origin" not in events[0]
    assert events[4]["op_type"] == "delete" and events[4]["source"] == "http"


async def test_no_request_when_url_unset(make_server: Any, make_receiver: Any) -> None:
    receiver: Receiver = await make_receiver()
    srv = await make_server()
    assert srv.app.webhooks is None
    async with httpx.AsyncClient(base_url=srv.url) as client:
        h = await issue(client)
        for _ in range(5):
            assert (await op(client, h, "gc:a", {"op": "increment"})).status_code == 200
    await asyncio.sleep(0.3)
    assert receiver.requests == [] and receiver.connections == 0


async def test_dead_receiver_does_not_slow_ops(make_server: Any, dead_url: str) -> None:
    srv = await make_server(webhook_url=dead_url, rate_limit=100_000, webhook_drain_s=0.2)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        h = await issue(client)
        started = time.perf_counter()
        for _ in range(50):
            assert (await op(client, h, "gc:a", {"op": "increment"})).status_code == 200
        per_op = (time.perf_counter() - started) / 50
    # Delivery retries run for ~1.4 s per event; the op path never waits for them.
    assert per_op < 0.1, per_op
    metrics = srv.app.metrics.render().decode()
    assert "service_webhook_queue_depth" in metrics
    started = time.perf_counter()
    await srv.server.shutdown()
    assert time.perf_counter() - started < 2.0  # the drain bound, not the retries


async def test_admin_token_is_not_a_webhook_client(make_server: Any, make_receiver: Any) -> None:
    """Ops by the root admin are delivered too (client_id 0)."""
    receiver: Receiver = await make_receiver()
    srv = await make_server(webhook_url=receiver.url)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        r = await op(client, {"authorization": f"Bearer {ADMIN}"}, "gc:root", {"op": "increment"})
        assert r.status_code == 200
    await receiver.wait_for(1)
    assert receiver.requests[0].json()["client_id"] == 0
    assert receiver.requests[0].header("x-service-signature") is None


async def test_a_yjs_update_fires_a_webhook_and_counts_in_the_metrics(
    make_server: Any, make_receiver: Any
) -> None:
    """An update from a y-websocket connection takes the op path: a signed
    webhook with source ``yjs`` and the connection's origin, and the op
    counter of /metrics."""
    from pycrdt import Doc, Text, create_sync_message, create_update_message

    receiver: Receiver = await make_receiver(secret=SECRET)
    srv = await make_server(webhook_url=receiver.url, webhook_secret=SECRET)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        h = await issue(client, client_id=11)
        token = h["authorization"].split()[1]
        url = (
            f"ws://127.0.0.1:{srv.port}/v1/namespaces/app/yjs/hooked?token={token}&origin=editor:1"
        )
        doc: Doc[Any] = Doc()
        updates: list[bytes] = []
        doc.observe(lambda event: updates.append(event.update))
        doc.get("content", type=Text).insert(0, "hi")
        async with connect(url, proxy=None, compression=None, ping_interval=None) as ws:
            await ws.send(create_sync_message(doc))
            await ws.send(create_update_message(updates[0]))
            await receiver.wait_for(1)
        (event,) = (req.json() for req in receiver.requests)
        assert receiver.requests[0].signature_ok
        assert event["crdt_id"] == "yd:hooked" and event["source"] == "yjs"
        assert event["op_type"] == "update" and event["client_id"] == 11 and event["seq"] == 1
        assert event["origin"] == "editor:1"  # the connection's ?origin=
        metrics = (await client.get("/metrics")).text
        counted = [line for line in metrics.splitlines() if line.startswith("service_ops_total{")]
        assert any(
            'crdt_id="yd:hooked"' in line and 'op_type="update"' in line and line.endswith(" 1.0")
            for line in counted
        ), counted
