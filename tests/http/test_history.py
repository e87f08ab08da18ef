"""History, ``?at=`` and restore over real sockets: answers, errors, permissions."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgpack
import pytest

from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


async def _texts(client: httpx.AsyncClient, h: dict[str, str], n: int) -> list[str]:
    """n inserts into rg:doc; the text after each (index 0: before any)."""
    texts = [""]
    for i in range(n):
        r = await op(
            client, h, "rg:doc", {"op": "insert", "index": i % 3, "text": chr(97 + i % 26)}
        )
        assert r.status_code == 200
        texts.append((await client.get(f"{BASE}/rg:doc", headers=h)).json()["text"])
    return texts


async def test_history_pages_newest_first_with_a_cursor(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    await _texts(client, h, 25)
    r = await client.get(f"{BASE}/rg:doc/history?limit=10", headers=h)
    assert r.status_code == 200
    page = r.json()
    assert page["seq"] == 25 and page["oldest"] == 0 and page["type"] == "rga"
    assert [o["seq"] for o in page["ops"]] == list(range(25, 15, -1))
    first = page["ops"][0]
    assert (
        first["client_id"] == 7 and isinstance(first["ts"], int) and first["op"]["op"] == "insert"
    )
    seqs = [o["seq"] for o in page["ops"]]
    while page["next"] is not None:
        page = (
            await client.get(f"{BASE}/rg:doc/history?limit=10&before={page['next']}", headers=h)
        ).json()
        seqs += [o["seq"] for o in page["ops"]]
    assert seqs == list(range(25, 0, -1))


async def test_at_seq_reads_the_state_right_after_that_op(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    texts = await _texts(client, h, 30)
    for seq in (0, 1, 7, 29, 30):
        r = await client.get(f"{BASE}/rg:doc?at={seq}", headers=h)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["seq"] == seq and body.get("text", "") == texts[seq]
    full = (await client.get(f"{BASE}/rg:doc?format=crdt&at=3", headers=h)).json()
    assert full["seq"] == 3 and "runs" in full["state"]


async def test_presence_at_a_seq_is_judged_at_that_op_s_time(client: httpx.AsyncClient) -> None:
    """A read right after op SEQ judged who was live then: an entry that has
    expired since is still there at its own seq, and gone at a later one
    (judged now, every past entry read as expired)."""
    h = await issue(client)
    first = {"op": "update", "data": {"n": 1}, "ttl_ms": 1000}
    assert (await op(client, h, "pr:room", first)).status_code == 200
    await asyncio.sleep(1.2)  # past that entry's ttl_ms
    other = await issue(client, client_id=8)
    second = {"op": "update", "data": {"n": 2}, "ttl_ms": 60_000}
    assert (await op(client, other, "pr:room", second)).status_code == 200
    views = {}
    for seq in (0, 1, 2):
        r = await client.get(f"{BASE}/pr:room?at={seq}", headers=h)
        assert r.status_code == 200, r.text
        views[seq] = r.json()["value"]
    assert views == {0: {}, 1: {"7": {"n": 1}}, 2: {"8": {"n": 2}}}
    now = (await client.get(f"{BASE}/pr:room", headers=h)).json()["value"]
    assert now == {"8": {"n": 2}}


@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ("?at=31", 400, "bad_request"),  # the future
        ("?at=-1", 400, "bad_request"),
        ("?at=x", 400, "bad_request"),
        ("?at=99999999999999999999999", 400, "bad_request"),
    ],
)
async def test_bad_seqs_are_400(
    client: httpx.AsyncClient, query: str, status: int, code: str
) -> None:
    h = await issue(client)
    await _texts(client, h, 30)
    r = await client.get(f"{BASE}/rg:doc{query}", headers=h)
    assert (r.status_code, r.json()["error"]) == (status, code)


async def test_history_needs_read_and_restore_needs_write(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    await _texts(client, h, 3)
    nobody = await issue(client, client_id=8, read=["other:*"], write=[])
    reader = await issue(client, client_id=9, read=["*"], write=[])
    for url in (f"{BASE}/rg:doc/history", f"{BASE}/rg:doc?at=1"):
        assert (await client.get(url, headers=nobody)).status_code == 403
        assert (await client.get(url, headers=reader)).status_code == 200
    r = await client.post(f"{BASE}/rg:doc/restore", json={"seq": 1}, headers=reader)
    assert (r.status_code, r.json()["error"]) == (403, "forbidden")
    assert (await client.get(f"{BASE}/rg:doc", headers=h)).json()["seq"] == 3  # untouched
    assert (await client.get(f"{BASE}/rg:nope/history", headers=h)).status_code == 404
    assert (await client.get(f"{BASE}/rg:doc/history")).status_code == 401


async def test_restore_makes_the_state_equal_and_is_an_ordinary_write(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    h = await issue(client)
    texts = await _texts(client, h, 12)
    r = await client.post(f"{BASE}/rg:doc/restore", json={"seq": 5, "op_id": "r1"}, headers=h)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["restored"] == 5 and answer["seq"] > 12 and answer["applied"] >= 1
    now = (await client.get(f"{BASE}/rg:doc", headers=h)).json()
    assert now["text"] == texts[5] and now["seq"] == answer["seq"]
    # Its ops are in the history like any others, by the restoring client.
    ops = (await client.get(f"{BASE}/rg:doc/history?limit=1", headers=h)).json()["ops"]
    assert ops[0]["client_id"] == 7 and ops[0]["op_id"].startswith("r1/")
    # The same op_id again: the first answer, nothing applied twice.
    again = await client.post(f"{BASE}/rg:doc/restore", json={"seq": 5, "op_id": "r1"}, headers=h)
    assert again.json()["duplicate"] is True and again.json()["seq"] == answer["seq"]
    assert (await client.get(f"{BASE}/rg:doc", headers=h)).json()["seq"] == answer["seq"]
    # Restoring to the present is a no-op.
    same = await client.post(f"{BASE}/rg:doc/restore", json={"seq": answer["seq"]}, headers=h)
    assert same.json()["applied"] == 0


async def test_restore_of_every_restorable_type(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    cases: list[tuple[str, list[dict[str, Any]]]] = [
        ("pn:c", [{"op": "increment", "amount": 5}, {"op": "decrement", "amount": 9}]),
        ("lw:r", [{"op": "set", "value": {"a": 1}}, {"op": "set", "value": [2]}]),
        ("or:s", [{"op": "add", "element": "x"}, {"op": "remove", "element": "x"}]),
        (
            "tr:t",
            [{"op": "add", "id": "a"}, {"op": "add", "id": "b", "parent": "a"}],
        ),
    ]
    for crdt_id, ops in cases:
        await op(client, h, crdt_id, ops[0])
        then = (await client.get(f"{BASE}/{crdt_id}", headers=h)).json()["value"]
        await op(client, h, crdt_id, ops[1])
        r = await client.post(f"{BASE}/{crdt_id}/restore", json={"seq": 1}, headers=h)
        assert r.status_code == 200, (crdt_id, r.text)
        assert (await client.get(f"{BASE}/{crdt_id}", headers=h)).json()["value"] == then


@pytest.mark.parametrize(
    ("crdt_id", "body"),
    [("gc:g", {"op": "increment"}), ("pr:p", {"op": "update", "data": {"x": 1}})],
)
async def test_types_that_cannot_go_back_answer_409(
    client: httpx.AsyncClient, crdt_id: str, body: dict[str, Any]
) -> None:
    h = await issue(client)
    await op(client, h, crdt_id, body)
    await op(client, h, crdt_id, body)
    r = await client.post(f"{BASE}/{crdt_id}/restore", json={"seq": 1}, headers=h)
    assert r.status_code == 409 and r.json()["error"] == "not_restorable" and r.json()["message"]


@pytest.mark.parametrize(
    "body",
    [[], {"seq": -1}, {"seq": "1"}, {}, {"seq": 1, "op_id": ""}, {"seq": 1, "op_id": 5}],
)
async def test_bad_restore_bodies_are_400(client: httpx.AsyncClient, body: Any) -> None:
    h = await issue(client)
    await op(client, h, "pn:c", {"op": "increment"})
    r = await client.post(f"{BASE}/pn:c/restore", json=body, headers=h)
    assert r.status_code == 400, r.text


async def test_expired_history_is_410_with_the_oldest_seq(make_server: Any) -> None:
    from syncd.store.history_index import Retention

    server = await make_server(history_retention=Retention(ops=10))
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        # Past a checkpoint or two (16 KiB of ops), in batches (rate limits).
        for _ in range(3):
            await op(client, h, "pn:c", [{"op": "increment"}] * 200)
        store = server.app.store
        await store.compact_now()
        await store.compact_history()
        r = await client.get(f"{BASE}/pn:c?at=3", headers=h)
        assert r.status_code == 410, r.text
        body = r.json()
        assert body["error"] == "history_expired" and 3 < body["oldest"] <= 590
        ok = await client.get(f"{BASE}/pn:c?at={body['oldest']}", headers=h)
        assert ok.status_code == 200 and ok.json()["value"] == body["oldest"]
        r = await client.post(f"{BASE}/pn:c/restore", json={"seq": 3}, headers=h)
        assert r.status_code == 410
        assert (await client.get(f"{BASE}/pn:c", headers=h)).json()["value"] == 600


async def test_restore_fans_out_like_any_write(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        await op(client, h, "pn:c", {"op": "increment", "amount": 4})
        await op(client, h, "pn:c", {"op": "increment", "amount": 4})
        async with client.stream("GET", "/v1/namespaces/app/crdts/pn:c/events", headers=h) as sse:
            lines = sse.aiter_lines()

            async def next_data() -> dict[str, Any]:
                async for line in lines:
                    if line.startswith("data:"):
                        decoded: dict[str, Any] = msgpack.unpackb(base64.b64decode(line[5:]))
                        return decoded
                raise AssertionError("stream ended")

            assert (await asyncio.wait_for(next_data(), 5))["kind"] == "snapshot"
            assert (await asyncio.wait_for(next_data(), 5))["kind"] == "synced"  # the start's end
            r = await client.post(f"{BASE}/pn:c/restore", json={"seq": 1}, headers=h)
            assert r.status_code == 200
            delta = await asyncio.wait_for(next_data(), 5)
            assert delta["seq"] == 3 and delta["op"]["op"] == "decrement"
            assert delta["op"]["amount"] == 4


async def test_large_filtered_pages_answer_as_every_op_read(make_server: Any) -> None:
    """12,000 ops of two writers and three origins: filtered pages of 1000
    (the most a page holds), followed by ``next`` to the end, are exactly the
    unfiltered history filtered, within the scan bound (MAX_HISTORY_SCAN
    records a page looks at), whatever the store decodes to find them."""
    from syncd.history.reads import MAX_HISTORY_LIMIT, MAX_HISTORY_SCAN
    from syncd.store.history_index import Retention

    total, batch = 12_000, 500
    server = await make_server(history_retention=Retention(ops=2 * total), rate_limit=100_000)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        human, agent = await issue(client, client_id=7), await issue(client, client_id=9)
        origins = ["agent:t1", "agent:t2", None]
        for start in range(0, total, batch):
            h = agent if start // batch % 3 else human  # two agent batches to a human one
            body = [
                {"op": "increment"} | ({"origin": o} if (o := origins[i % 3]) else {})
                for i in range(start, start + batch)
            ]
            assert (await op(client, h, "pn:big", body)).status_code == 200
        every: list[dict[str, Any]] = []
        before = ""
        while True:
            page = (
                await client.get(
                    f"{BASE}/pn:big/history?limit={MAX_HISTORY_LIMIT}{before}", headers=human
                )
            ).json()
            every += page["ops"]
            if page["next"] is None:
                break
            before = f"&before={page['next']}"
        assert [o["seq"] for o in every] == list(range(total, 0, -1))

        def expected(query: dict[str, Any], cursor: int | None) -> tuple[list[Any], int | None]:
            below = [o for o in every if cursor is None or o["seq"] < cursor]
            looked_at = below[:MAX_HISTORY_SCAN]
            found = [o for o in looked_at if all(o.get(k) == v for k, v in query.items())]
            if len(found) >= MAX_HISTORY_LIMIT:
                found = found[:MAX_HISTORY_LIMIT]
                return found, found[-1]["seq"] if found[-1]["seq"] > 1 else None
            return found, looked_at[-1]["seq"] if len(below) > MAX_HISTORY_SCAN else None

        for query in (
            {"client_id": 9},
            {"origin": "agent:t1"},
            {"client_id": 7, "origin": "agent:t2"},
        ):
            cursor: int | None = None
            pages = 0
            while True:
                params = "&".join(f"{k}={v}" for k, v in query.items())
                after = "" if cursor is None else f"&before={cursor}"
                r = await client.get(
                    f"{BASE}/pn:big/history?{params}&limit={MAX_HISTORY_LIMIT}{after}",
                    headers=human,
                )
                assert r.status_code == 200, r.text
                page = r.json()
                want_ops, want_next = expected(query, cursor)
                assert (page["ops"], page["next"]) == (want_ops, want_next), (query, cursor)
                assert page["oldest"] == 0
                pages += 1
                if page["next"] is None:
                    break
                cursor = page["next"]
            assert pages >= 2, query  # the limit or the scan bound, then the rest
