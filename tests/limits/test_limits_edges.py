"""Every request-shape limit at its edge, over real sockets (both parsers where
HTTP parsing is involved): the last value accepted and the first refused.

Limits already tested at their edge elsewhere are not repeated here: element,
presence-data and tree-data sizes (tests/crdt), op_id length and batch size
in the engine (tests/crdt), token size (tests/auth), WebSocket message size,
subscriptions per connection, connections and message nesting
(tests/ws, tests/http).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from syncd.crdt.engine import MAX_BATCH_OPS, MAX_LIST_LIMIT
from syncd.http.parser import MAX_HEAD_BYTES, MAX_HEADERS
from syncd.ws.session import MAX_INFLIGHT_OPS
from tests.conftest import ADMIN, RunningServer, open_raw, read_response
from tests.http.support import ADMIN_HEADERS
from tests.store.support import gated_server
from tests.ws.support import open_ws, recv, send_mp

JSON = {"content-type": "application/json"}


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS) as c:
        yield c


def nested_list(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


async def test_json_body_depth_edge(make_server: Any) -> None:
    """SERVICE_JSON_MAX_DEPTH counts every level of the body, the op's own object included."""
    depth = 8
    server = await make_server(json_max_depth=depth)
    async with httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS) as client:
        url = "/v1/namespaces/app/crdts/lw:deep/ops"
        ok = {"op": "set", "value": nested_list(depth - 1)}  # the op object is level 1
        r = await client.post(url, json=ok)
        assert r.status_code == 200, r.text
        too_deep = {"op": "set", "value": nested_list(depth)}
        r = await client.post(url, json=too_deep)
        assert r.status_code == 400 and r.json()["error"] == "bad_request"
        assert "deeper than 8" in r.json()["message"]
        # the token routes parse with the same bound
        body = {"client_id": 1, "permissions": {"read": [], "write": []}, "x": nested_list(depth)}
        r = await client.post("/v1/namespaces/app/tokens", json=body)
        assert r.status_code == 400 and "deeper" in r.json()["message"]


@pytest.mark.parametrize("chunked", [False, True])
async def test_body_size_edge(make_server: Any, chunked: bool) -> None:
    """SERVICE_MAX_BODY_BYTES: a body of exactly the limit is read, one byte more is 413."""
    limit = 1000
    server = await make_server(max_body_bytes=limit)
    op = b'{"op":"increment"}'

    def request(size: int) -> bytes:
        body = op + b" " * (size - len(op))  # JSON allows trailing whitespace
        head = (
            b"POST /v1/namespaces/app/crdts/gc:size/ops HTTP/1.1\r\nHost: t\r\n"
            b"Authorization: Bearer " + ADMIN.encode() + b"\r\nContent-Type: application/json\r\n"
        )
        if chunked:
            half = size // 2
            chunks = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (
                half,
                body[:half],
                size - half,
                body[half:],
            )
            return head + b"Transfer-Encoding: chunked\r\n\r\n" + chunks
        return head + b"Content-Length: %d\r\n\r\n" % size + body

    reader, writer = await open_raw(server.port)
    writer.write(request(limit))
    status, _, body = await read_response(reader)
    assert status == 200, body
    writer.write(request(limit + 1))
    status, _, body = await read_response(reader)
    assert status == 413 and json.loads(body)["error"] == "payload_too_large"
    writer.close()


async def test_header_count_and_head_size_edges(server: RunningServer) -> None:
    """MAX_HEADERS header lines (Host included) and a head of MAX_HEAD_BYTES
    bytes (request line to blank line, both included) pass; one more 431."""

    async def status_of(raw: bytes) -> int:
        reader, writer = await open_raw(server.port)
        writer.write(raw)
        status, _, _ = await read_response(reader)
        writer.close()
        return status

    def with_headers(count: int) -> bytes:
        extra = b"".join(b"X-H%d: v\r\n" % i for i in range(count - 1))
        return b"GET /health/live HTTP/1.1\r\nHost: t\r\n" + extra + b"\r\n"

    assert await status_of(with_headers(MAX_HEADERS)) == 200
    assert await status_of(with_headers(MAX_HEADERS + 1)) == 431

    start = b"GET /health/live HTTP/1.1\r\nHost: t\r\nX-Pad: "

    def with_head_bytes(total: int) -> bytes:
        return start + b"p" * (total - len(start) - 4) + b"\r\n\r\n"

    assert await status_of(with_head_bytes(MAX_HEAD_BYTES)) == 200
    assert await status_of(with_head_bytes(MAX_HEAD_BYTES + 1)) == 431


async def test_namespace_and_id_length_edges(
    client: httpx.AsyncClient, server: RunningServer
) -> None:
    ns_ok, ns_long = "n" * 128, "n" * 129
    id_ok, id_long = "i" * 256, "i" * 257
    op = {"op": "increment", "type": "gcounter"}
    r = await client.post(f"/v1/namespaces/{ns_ok}/crdts/{id_ok}/ops", json=op)
    assert r.status_code == 200, r.text
    r = await client.post(f"/v1/namespaces/{ns_long}/crdts/{id_ok}/ops", json=op)
    assert r.status_code == 400 and r.json()["error"] == "invalid_namespace"
    r = await client.post(f"/v1/namespaces/{ns_ok}/crdts/{id_long}/ops", json=op)
    assert r.status_code == 400 and r.json()["error"] == "invalid_id"
    # The same edges over a WebSocket: the upgrade's namespace, the messages' ids.
    r = await client.get(f"/v1/namespaces/{ns_long}/ws?token={ADMIN}")
    assert r.status_code == 400 and r.json()["error"] == "invalid_namespace"
    async with open_ws(server) as ws:
        await send_mp(ws, {"kind": "subscribe", "id": id_ok})
        assert (await recv(ws))["kind"] == "snapshot"
        await send_mp(ws, {"kind": "subscribe", "id": id_long, "ref": 2})
        answer = await recv(ws)
        assert (answer["kind"], answer["error"], answer["ref"]) == ("error", "invalid_id", 2)


async def test_batch_size_edge_over_websocket(server: RunningServer) -> None:
    async with open_ws(server) as ws:
        batch = [{"op": "increment"}] * MAX_BATCH_OPS
        await send_mp(ws, {"kind": "op", "id": "gc:batch", "op": batch, "ref": 1})
        assert await recv(ws) == {
            "kind": "ack",
            "ref": 1,
            "seq": MAX_BATCH_OPS,
            "applied": MAX_BATCH_OPS,
        }
        await send_mp(
            ws, {"kind": "op", "id": "gc:batch", "op": [*batch, {"op": "increment"}], "ref": 2}
        )
        answer = await recv(ws)
        assert (answer["kind"], answer["error"], answer["ref"]) == ("error", "bad_request", 2)


async def test_batch_size_edge_over_http(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v1/namespaces/app/crdts/gc:batch/ops", json=[{"op": "increment"}] * MAX_BATCH_OPS
    )
    assert r.json() == {"ok": True, "seq": MAX_BATCH_OPS, "applied": MAX_BATCH_OPS}


async def test_list_limit_edge(client: httpx.AsyncClient) -> None:
    url = "/v1/namespaces/app/crdts?limit="
    assert (await client.get(url + str(MAX_LIST_LIMIT))).status_code == 200
    r = await client.get(url + str(MAX_LIST_LIMIT + 1))
    assert r.status_code == 400 and r.json()["error"] == "bad_request"


async def test_inflight_ops_per_connection_edge(tmp_path: Path) -> None:
    """MAX_INFLIGHT_OPS op messages may await their answers; past that the
    session stops reading until half of them are answered, then every op is
    answered in order. The ops wait in a real embedded store whose log
    writes wait on a gate (tests/store/support.py)."""
    extra = 50
    async with gated_server(tmp_path / "data") as (server, faults):
        faults.gate = gate = threading.Event()
        async with open_ws(server, max_size=None) as ws:
            for ref in range(MAX_INFLIGHT_OPS + extra):
                await send_mp(
                    ws, {"kind": "op", "id": "gc:flight", "op": {"op": "increment"}, "ref": ref}
                )
            (connection,) = server.server.ctx.other_connections
            session = connection.session
            for _ in range(200):
                if session.inflight == MAX_INFLIGHT_OPS:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)  # had it read on, more would be in flight by now
            assert session.inflight == MAX_INFLIGHT_OPS
            assert session.held
            gate.set()
            refs = [(await recv(ws))["ref"] for _ in range(MAX_INFLIGHT_OPS + extra)]
            assert refs == list(range(MAX_INFLIGHT_OPS + extra))
