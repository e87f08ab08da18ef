"""The CRDT routes end to end over real sockets, for every type and error code."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS, issue, op


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


async def read(
    client: httpx.AsyncClient, headers: dict[str, str], crdt_id: str, query: str = ""
) -> httpx.Response:
    return await client.get(f"/v1/namespaces/app/crdts/{crdt_id}{query}", headers=headers)


async def test_every_type_over_http(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    # gcounter
    assert (await op(client, h, "gc:a", {"op": "increment", "amount": 3})).json() == {
        "ok": True,
        "seq": 1,
        "applied": 1,
    }
    body = (await read(client, h, "gc:a")).json()
    assert (
        body["value"] == 3
        and body["counts"] == {"7": 3}
        and body["type"] == "gcounter"
        and body["seq"] == 1
    )
    assert isinstance(body["epoch"], str)
    # pncounter
    await op(
        client, h, "pn:a", [{"op": "increment", "amount": 5}, {"op": "decrement", "amount": 2}]
    )
    body = (await read(client, h, "pn:a")).json()
    assert (
        body["value"] == 3 and body["p"] == {"7": 5} and body["n"] == {"7": 2} and body["seq"] == 2
    )
    # orset
    await op(
        client,
        h,
        "or:s",
        [
            {"op": "add", "element": {"b": 1, "a": 2}},
            {"op": "add", "element": "x"},
            {"op": "remove", "element": "nope"},
        ],
    )
    body = (await read(client, h, "or:s")).json()
    assert body["value"] == ["x", {"a": 2, "b": 1}] and body["seq"] == 3
    # lwwregister
    await op(client, h, "lw:r", {"op": "set", "value": {"k": [1, 2]}, "timestamp": 1000})
    body = (await read(client, h, "lw:r")).json()
    assert body["value"] == {"k": [1, 2]} and body["timestamp"] == 1000 and body["client_id"] == 7
    # presence
    await op(client, h, "pr:room", {"op": "update", "data": {"name": "ann"}, "ttl_ms": 60000})
    body = (await read(client, h, "pr:room")).json()
    assert body["value"] == {"7": {"name": "ann"}} and "7" in body["expires_at"]
    await op(client, h, "pr:room", {"op": "leave"})
    assert (await read(client, h, "pr:room")).json()["value"] == {}
    # rga
    r = await op(client, h, "rg:doc", {"op": "insert", "index": 0, "text": "held"})
    ids = r.json()["ids"]
    assert len(ids) == 4 and all(i.endswith("@7") for i in ids)
    await op(client, h, "rg:doc", {"op": "insert", "index": 3, "text": "lo wor"})
    await op(client, h, "rg:doc", {"op": "delete", "index": 9, "count": 1})
    await op(client, h, "rg:doc", {"op": "delete", "ids": [ids[0]]})
    body = (await read(client, h, "rg:doc")).json()
    assert body["text"] == "ello wor" and body["value"] == list("ello wor")
    # tree
    await op(
        client,
        h,
        "tr:t",
        [
            {"op": "add", "id": "a", "parent": "root", "data": {"n": 1}},
            {"op": "add", "id": "b", "parent": "a", "pos": "1"},
            {"op": "add", "id": "c", "parent": "root", "pos": "0"},
            {"op": "move", "id": "b", "parent": "c"},
            {"op": "update", "id": "a", "data": {"n": 2}},
        ],
    )
    value = (await read(client, h, "tr:t")).json()["value"]
    assert value["id"] == "root"
    assert [c["id"] for c in value["children"]] == ["a", "c"]
    assert value["children"][0]["data"] == {"n": 2}
    assert [c["id"] for c in value["children"][1]["children"]] == ["b"]
    await op(client, h, "tr:t", {"op": "delete", "id": "c"})
    value = (await read(client, h, "tr:t")).json()["value"]
    assert [c["id"] for c in value["children"]] == ["a"]


async def test_type_from_op_field_and_mismatch(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    assert (
        await op(client, h, "plain", {"op": "increment", "type": "gcounter"})
    ).status_code == 200
    r = await op(client, h, "plain", {"op": "add", "type": "orset", "element": 1})
    assert r.status_code == 409 and r.json()["error"] == "type_mismatch"
    r = await op(client, h, "gc:x", {"op": "add", "type": "orset", "element": 1})
    assert r.status_code == 409 and r.json()["error"] == "type_mismatch"
    r = await op(client, h, "fresh", {"op": "increment"})
    assert r.status_code == 400 and r.json()["error"] == "unknown_type"
    r = await op(client, h, "fresh", {"op": "increment", "type": "hyperloglog"})
    assert r.status_code == 400 and r.json()["error"] == "unknown_type"


async def test_format_crdt_and_return_state(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    r = await op(client, h, "or:s", {"op": "add", "element": 1}, query="?return=state")
    assert r.json()["state"]["value"] == [1]
    full = (await read(client, h, "or:s", "?format=crdt")).json()
    assert set(full) >= {"id", "type", "seq", "epoch", "state"} and full["state"] is not None


async def test_the_ops_routes_parameters_are_used_or_refused_before_any_op(
    client: httpx.AsyncClient,
) -> None:
    """?return= other than state, and ?return= or ?origin= given twice, are
    400 naming the parameter, and the ops are not applied (they were, and
    the answer left the state out without a word)."""
    h = await issue(client)
    for query, name in (
        ("?return=stat", "return"),
        ("?return=", "return"),
        ("?return=state&return=state", "return"),
        ("?origin=a&origin=b", "origin"),
    ):
        r = await op(client, h, "gc:q", {"op": "increment"}, query=query)
        assert r.status_code == 400 and r.json()["error"] == "bad_request", (query, r.text)
        assert r.json()["message"].startswith(f"{name}:"), (query, r.text)
    assert (await read(client, h, "gc:q")).status_code == 404  # nothing was applied
    r = await op(client, h, "gc:q", {"op": "increment"}, query="?return=state&origin=ui&_=1&_=2")
    assert r.status_code == 200 and r.json()["state"]["value"] == 1, r.text


async def test_batches_all_or_none_and_op_ids(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    r = await op(
        client,
        h,
        "rg:d",
        [{"op": "insert", "index": 0, "text": "ab"}, {"op": "delete", "index": 5}],
    )
    assert r.status_code == 400 and r.json()["error"] == "invalid_op"
    assert (await read(client, h, "rg:d")).status_code == 404
    r = await op(
        client, h, "gc:c", [{"op": "increment", "op_id": "k1"}, {"op": "increment", "op_id": "k2"}]
    )
    assert r.json() == {"ok": True, "seq": 2, "applied": 2}
    r = await op(client, h, "gc:c", {"op": "increment", "op_id": "k1", "amount": 1})
    assert r.json() == {"ok": True, "seq": 1, "applied": 1, "duplicate": True}
    assert (await read(client, h, "gc:c")).json()["value"] == 2
    r = await op(client, h, "gc:c", [{"op": "increment"}] * 1001)
    assert r.status_code == 400 and r.json()["error"] == "bad_request"
    r = await op(client, h, "gc:c", [])
    assert r.status_code == 400
    r = await op(client, h, "gc:c", ["nope"])
    assert r.status_code == 400 and r.json()["error"] == "bad_request"


@pytest.mark.parametrize(
    ("crdt_id", "body", "status", "code"),
    [
        ("gc:a", {"op": "increment", "amount": 0}, 400, "invalid_op"),
        ("gc:a", {"op": "increment", "amount": "1"}, 400, "invalid_op"),
        ("gc:a", {"op": "decrement"}, 400, "invalid_op"),
        ("lw:a", {"op": "set", "value": 1, "timestamp": 99999999999999}, 400, "invalid_op"),
        ("pr:a", {"op": "update", "data": {}, "ttl_ms": 10}, 400, "invalid_op"),
        ("rg:a", {"op": "delete", "ids": ["9@9"]}, 400, "invalid_op"),
        ("tr:a", {"op": "move", "id": "zz", "parent": "root"}, 400, "invalid_op"),
        ("tr:a", {"op": "delete", "id": "root"}, 400, "invalid_op"),
        ("gc:a", {"op": "increment", "client_id": 8}, 403, "forbidden"),
        ("gc:a", {"op": "increment", "op_id": "x" * 129}, 400, "invalid_op"),
    ],
)
async def test_op_errors(
    client: httpx.AsyncClient, crdt_id: str, body: Any, status: int, code: str
) -> None:
    h = await issue(client)
    r = await op(client, h, crdt_id, body)
    assert r.status_code == status, r.text
    assert r.json()["error"] == code and isinstance(r.json()["message"], str)
    assert set(r.json()) == {"error", "message"}


async def test_tree_cycle_is_409(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    await op(
        client,
        h,
        "tr:c",
        [{"op": "add", "id": "a", "parent": "root"}, {"op": "add", "id": "b", "parent": "a"}],
    )
    r = await op(client, h, "tr:c", {"op": "move", "id": "a", "parent": "b"})
    assert r.status_code == 409 and r.json()["error"] == "cycle"


async def test_request_errors(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    url = "/v1/namespaces/app/crdts/gc:a/ops"
    r = await client.post(url, content=b"{nope", headers={**h, "content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"] == "bad_request"
    r = await client.post(url, content=b"{}", headers={**h, "content-type": "text/plain"})
    assert r.status_code == 415 and r.json()["error"] == "unsupported_media_type"
    r = await client.post(
        url, content=b"[" * 5000 + b"]" * 5000, headers={**h, "content-type": "application/json"}
    )
    assert r.status_code == 400
    r = await client.post(
        url,
        content=b'{"op":"increment","amount":NaN}',
        headers={**h, "content-type": "application/json"},
    )
    assert r.status_code == 400
    r = await client.post(
        url, content=b'{"op":"\xff"}', headers={**h, "content-type": "application/json"}
    )
    assert r.status_code == 400
    r = await client.get("/v1/namespaces/..%2F..%2Fetc/crdts/x", headers=h)
    assert r.status_code == 400 and r.json()["error"] == "invalid_namespace"
    r = await client.get("/v1/namespaces/app/crdts/bad%2Fid", headers=h)
    assert r.status_code == 400 and r.json()["error"] == "invalid_id"
    r = await client.get("/v1/namespaces/app/crdts/" + "a" * 257, headers=h)
    assert r.status_code == 400 and r.json()["error"] == "invalid_id"
    r = await read(client, h, "gc:missing")
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    r = await client.put("/v1/namespaces/app/crdts/gc:a", headers=h)
    assert r.status_code == 405 and r.json()["error"] == "method_not_allowed"


async def test_auth_errors(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/namespaces/app/crdts/gc:a")
    assert r.status_code == 401 and r.json()["error"] == "missing_token"
    r = await client.get(
        "/v1/namespaces/app/crdts/gc:a", headers={"authorization": "Bearer garbage.token"}
    )
    assert r.status_code == 401 and r.json()["error"] == "invalid_token"
    other = await issue(client, ns="other")
    r = await client.get("/v1/namespaces/app/crdts/gc:a", headers=other)
    assert r.status_code == 403 and r.json()["error"] == "forbidden"
    ro = await issue(client, read=["gc:*"], write=[])
    r = await op(client, ro, "gc:a", {"op": "increment"})
    assert r.status_code == 403
    rules = await issue(client, rules={"r": [{"p": "*"}], "w": [{"p": "pn:*", "o": 1}]})
    assert (await op(client, rules, "pn:a", {"op": "increment"})).status_code == 200
    r = await op(client, rules, "pn:a", {"op": "decrement"})
    assert r.status_code == 403 and r.json()["error"] == "forbidden"
    expired = await issue(client, ttl_ms=1)
    await asyncio.sleep(0.01)
    r = await client.get("/v1/namespaces/app/crdts/gc:a", headers=expired)
    assert r.status_code == 401 and r.json()["error"] == "token_expired"
    r = await client.delete("/v1/namespaces/app/crdts/gc:a", headers=rules)
    assert r.status_code == 403


async def test_rate_limit_429(make_server: Any) -> None:
    srv = await make_server(rate_limit=5)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        h = await issue(client)
        codes = [
            (await client.get("/v1/namespaces/app/crdts/gc:a", headers=h)).status_code
            for _ in range(8)
        ]
        assert codes[:5] == [404] * 5 and codes[5:] == [429] * 3
        r = await client.get("/v1/namespaces/app/crdts/gc:a", headers=h)
        retry_after = int(r.headers["retry-after"])
        assert retry_after >= 1
        assert r.json() == {
            "error": "rate_limited",
            "message": "too many requests",
            "retry_after": retry_after,
        }


async def test_list_and_delete(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    for name in ("gc:a", "gc:b", "gc:c", "pn:a"):
        await op(client, h, name, {"op": "increment"})
    page = (await client.get("/v1/namespaces/app/crdts?prefix=gc:&limit=2", headers=h)).json()
    assert [c["id"] for c in page["crdts"]] == ["gc:a", "gc:b"] and page["next"]
    page2 = (
        await client.get(
            f"/v1/namespaces/app/crdts?prefix=gc:&limit=2&cursor={page['next']}", headers=h
        )
    ).json()
    assert [c["id"] for c in page2["crdts"]] == ["gc:c"] and page2["next"] is None
    limited = await issue(client, read=["pn:*"])
    listed = (await client.get("/v1/namespaces/app/crdts", headers=limited)).json()["crdts"]
    assert [c["id"] for c in listed] == ["pn:a"]
    assert (await client.get("/v1/namespaces/app/crdts?limit=5000", headers=h)).status_code == 400
    first_epoch = (await read(client, h, "gc:a")).json()["epoch"]
    assert (await client.delete("/v1/namespaces/app/crdts/gc:a", headers=h)).status_code == 403
    admin_ns = await issue(client, admin=True)
    assert (
        await client.delete("/v1/namespaces/app/crdts/gc:a", headers=admin_ns)
    ).status_code == 204
    assert (await read(client, h, "gc:a")).status_code == 404
    assert (
        await client.delete("/v1/namespaces/app/crdts/gc:a", headers=ADMIN_HEADERS)
    ).status_code == 404
    await op(client, h, "gc:a", {"op": "increment"})
    again = (await read(client, h, "gc:a")).json()
    assert again["seq"] == 1 and again["epoch"] != first_epoch


async def test_token_routes(client: httpx.AsyncClient) -> None:
    h = await issue(
        client,
        rules={"r": [{"p": "or:cart-{clientId}"}], "w": [{"p": "or:cart-{clientId}", "o": 3}]},
        client_id=42,
    )
    me = (await client.get("/v1/namespaces/app/tokens/me", headers=h)).json()
    assert me["permissions"]["v"] == 2 and me["permissions"]["r"][0]["p"] == "or:cart-{clientId}"
    assert me["client_id"] == 42 and me["namespace"] == "app"
    assert (await op(client, h, "or:cart-42", {"op": "add", "element": 1})).status_code == 200
    assert (await op(client, h, "or:cart-43", {"op": "add", "element": 1})).status_code == 403
    r = await client.post(
        "/v1/tokens",
        json={
            "namespace": "agents",
            "client_id": 5,
            "permissions": {"read": ["*"], "write": ["*"], "admin": False},
        },
        headers=ADMIN_HEADERS,
    )
    assert r.status_code == 200
    agent = {"authorization": f"Bearer {r.json()['token']}"}
    me = (await client.get("/v1/namespaces/agents/tokens/me", headers=agent)).json()
    assert me["permissions"] == {"read": ["*"], "write": ["*"], "admin": False}
    r = await client.post("/v1/namespaces/app/tokens", json={"client_id": 1}, headers=ADMIN_HEADERS)
    assert r.status_code == 400
    r = await client.post(
        "/v1/namespaces/app/tokens",
        json={"client_id": 1, "permissions": {"read": []}, "ttl_ms": 10**13},
        headers=ADMIN_HEADERS,
    )
    assert r.status_code == 400
    r = await client.post(
        "/v1/namespaces/app/tokens",
        json={"client_id": 1, "permissions": {"read": []}},
        headers=agent,
    )
    assert r.status_code == 403


async def test_concurrent_ops_all_acknowledged_and_counted(make_server: Any) -> None:
    srv = await make_server(fsync="batch", rate_limit=100_000)
    async with httpx.AsyncClient(
        base_url=srv.url, limits=httpx.Limits(max_connections=20)
    ) as client:
        h = await issue(client)
        results = await asyncio.gather(
            *(op(client, h, "gc:n", {"op": "increment"}) for _ in range(200))
        )
        seqs = sorted(r.json()["seq"] for r in results)
        assert seqs == list(range(1, 201))
        assert (await read(client, h, "gc:n")).json()["value"] == 200
        metrics = (await client.get("/metrics")).text
        assert 'service_ops_total{crdt_id="gc:n",ns="app",op_type="increment"} 200.0' in metrics
        assert 'service_merge_duration_seconds_count{ns="app"} 200.0' in metrics
        assert "service_wal_entries_total 200.0" in metrics


async def test_a_repeated_op_id_gets_the_first_answer_flagged(make_server: Any) -> None:
    server = await make_server()
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        body = {"op": "insert", "index": 0, "text": "hi", "op_id": "ins-1"}
        first = (await op(client, h, "rg:doc", body)).json()
        again = (await op(client, h, "rg:doc", body)).json()
        assert first["applied"] == 1 and "duplicate" not in first
        assert again == {**first, "duplicate": True}
        batch = [{"op": "increment", "op_id": "a"}, {"op": "increment", "op_id": "b"}]
        first = (await op(client, h, "gc:n", batch)).json()
        again = (await op(client, h, "gc:n", batch)).json()
        assert again == {**first, "duplicate": True} and first["applied"] == 2
        assert (await read(client, h, "gc:n")).json()["value"] == 2


async def test_a_misspelt_field_is_refused_not_defaulted(client: httpx.AsyncClient) -> None:
    """`amout` is not `amount`: 400 naming it, and nothing applied."""
    h = await issue(client)
    r = await op(client, h, "gc:typo", {"op": "increment", "amout": 2})
    assert r.status_code == 400 and r.json()["error"] == "invalid_op"
    assert r.json()["message"].startswith("amout: unknown field")
    assert (await read(client, h, "gc:typo")).status_code == 404
    batch = [{"op": "increment", "amount": 1}, {"op": "increment", "amount": 1, "ammount": 3}]
    r = await op(client, h, "gc:typo", batch)
    assert r.status_code == 400 and r.json()["message"].startswith("ops[1].ammount: unknown field")
    assert (await read(client, h, "gc:typo")).status_code == 404
    # The common fields are still taken on any op.
    full = {"op": "increment", "amount": 2, "type": "gcounter", "op_id": "t-1", "client_id": 7}
    assert (await op(client, h, "gc:typo", full)).json()["seq"] == 1
