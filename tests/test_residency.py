"""The engine as a cache over the store: CRDTs leave memory past the budget and
come back exactly as they were, on a real server over real sockets."""

from __future__ import annotations

import asyncio
import base64
import random
import socket
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import msgpack
import pytest
from pycrdt import Doc, Text
from websockets.asyncio.client import connect

from syncd.crdt.engine import MAX_LIST_LIMIT
from syncd.crdt.ydoc import MAX_UPDATE_BYTES
from syncd.residency import RETRY_S
from syncd.store.embedded.store import FileStore
from tests.conftest import RunningServer
from tests.http.support import issue, op
from tests.ws.support import op as ws_op
from tests.ws.support import ws_url

BASE = "/v1/namespaces/app/crdts"


def _ydoc_update(text: str) -> str:
    doc: Doc[Any] = Doc(client_id=5)
    doc.get("content", type=Text).insert(0, text)
    return base64.b64encode(doc.get_update()).decode()


# One op per type, each with an op_id: (id, ops).
WRITES: list[tuple[str, list[dict[str, Any]]]] = [
    ("gc:c", [{"op": "increment", "amount": 3}, {"op": "increment"}]),
    ("pn:p", [{"op": "increment", "amount": 5}, {"op": "decrement", "amount": 2}]),
    ("lw:r", [{"op": "set", "value": {"a": [1, 2]}}]),
    ("or:s", [{"op": "add", "element": "x"}, {"op": "add", "element": "y"}]),
    ("rg:t", [{"op": "insert", "index": 0, "text": "hello"}, {"op": "delete", "index": 0}]),
    ("tr:t", [{"op": "add", "id": "n1", "parent": "root", "data": {"k": 1}}]),
    ("yd:d", [{"op": "update", "update": _ydoc_update("shared text")}]),
]


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


async def _write_all(client: httpx.AsyncClient, h: dict[str, str]) -> None:
    for crdt_id, ops in WRITES:
        for i, body in enumerate(ops):
            r = await op(client, h, crdt_id, {**body, "op_id": f"{crdt_id}-{i}"})
            assert r.status_code == 200, r.text


async def _reads(client: httpx.AsyncClient, h: dict[str, str]) -> dict[str, Any]:
    out = {}
    for crdt_id, _ in WRITES:
        plain = (await client.get(f"{BASE}/{crdt_id}", headers=h)).json()
        full = (await client.get(f"{BASE}/{crdt_id}?format=crdt", headers=h)).json()
        plain.pop("expires_at", None)
        out[crdt_id] = (plain, full)
    return out


async def _evict_all(server: RunningServer) -> int:
    """Shrink the budget to nothing and run an eviction pass; what is resident after."""
    residency = server.app.residency
    residency.budget_bytes = 1
    residency.check()
    for _ in range(100):
        await asyncio.sleep(0.02)
        if residency._pass is None:  # the pass is done
            break
    return len(server.app.engine)


async def test_every_type_leaves_memory_and_comes_back_exactly(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    h = await issue(client)
    await _write_all(client, h)
    before = await _reads(client, h)
    engine = server.app.engine
    assert len(engine) == len(WRITES) and engine.resident_bytes > 0
    assert await _evict_all(server) == 0
    assert engine.resident_bytes == 0
    evictions = server.app.residency.stats.evictions
    assert evictions == len(WRITES)
    # Reads load each back, equal in value, seq, epoch and mergeable state.
    server.app.residency.budget_bytes = 1 << 30
    assert await _reads(client, h) == before
    assert server.app.residency.stats.loads == len(WRITES)
    # op_ids survive the eviction: every retry is a duplicate with the first answer.
    await _evict_all(server)
    server.app.residency.budget_bytes = 1 << 30
    for crdt_id, ops in WRITES:
        for i, body in enumerate(ops):
            r = await op(client, h, crdt_id, {**body, "op_id": f"{crdt_id}-{i}"})
            assert r.json()["duplicate"] is True, (crdt_id, r.text)
            assert r.json()["seq"] == i + 1
    assert await _reads(client, h) == before
    metrics = (await client.get("/metrics")).text
    assert "service_engine_evictions_total 14.0" in metrics
    assert "service_engine_resident_crdts 7.0" in metrics
    assert "service_engine_load_seconds_count" in metrics


async def test_ops_on_an_evicted_crdt_continue_its_life(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    h = await issue(client)
    await op(client, h, "gc:a", {"op": "increment", "amount": 2})
    epoch = (await client.get(f"{BASE}/gc:a", headers=h)).json()["epoch"]
    await _evict_all(server)
    server.app.residency.budget_bytes = 1 << 30
    r = await op(client, h, "gc:a", {"op": "increment"})
    assert r.json()["seq"] == 2
    read = (await client.get(f"{BASE}/gc:a", headers=h)).json()
    assert (read["value"], read["epoch"]) == (3, epoch)
    # Over the WebSocket too (ops staged in runs).
    await _evict_all(server)
    server.app.residency.budget_bytes = 1 << 30
    token = h["authorization"].split()[1]
    async with connect(ws_url(server, token, ns="app"), proxy=None, compression=None) as ws:
        answer = await ws_op(ws, "gc:a", {"op": "increment"})
        assert (answer["kind"], answer.get("seq")) == ("ack", 3), answer
    read = (await client.get(f"{BASE}/gc:a", headers=h)).json()
    assert (read["value"], read["seq"], read["epoch"]) == (4, 3, epoch)


async def test_unknown_ids_are_misses_and_deletes_reach_evicted_crdts(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    h = await issue(client, admin=True)
    assert (await client.get(f"{BASE}/gc:none", headers=h)).status_code == 404
    assert server.app.residency.stats.misses == 1
    await op(client, h, "gc:gone", {"op": "increment"})
    await _evict_all(server)
    server.app.residency.budget_bytes = 1 << 30
    assert (await client.delete(f"{BASE}/gc:gone", headers=h)).status_code == 204
    assert (await client.get(f"{BASE}/gc:gone", headers=h)).status_code == 404
    await _evict_all(server)
    assert (await client.get(f"{BASE}/gc:gone", headers=h)).status_code == 404
    # A new life starts at seq 1.
    assert (await op(client, h, "gc:gone", {"op": "increment"})).json()["seq"] == 1


async def test_subscribed_and_present_crdts_stay(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    h = await issue(client)
    await op(client, h, "gc:watched", {"op": "increment"})
    await op(client, h, "pr:room", {"op": "update", "data": {"name": "a"}, "ttl_ms": 60_000})
    await op(client, h, "gc:idle", {"op": "increment"})
    async with client.stream("GET", f"{BASE}/gc:watched/events", headers=h) as stream:
        lines = stream.aiter_lines()
        assert (await anext(lines)).startswith("data:")
        assert await _evict_all(server) == 2
        engine = server.app.engine
        assert engine.get("app", "gc:idle") is None
        assert engine.get("app", "gc:watched") is not None
        assert engine.get("app", "pr:room") is not None


async def test_a_subscription_to_an_evicted_crdt_starts_with_its_state(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    h = await issue(client)
    for _ in range(3):
        await op(client, h, "gc:cold", {"op": "increment"})
    await _evict_all(server)
    server.app.residency.budget_bytes = 1 << 30
    async with client.stream("GET", f"{BASE}/gc:cold/events", headers=h) as stream:
        lines = stream.aiter_lines()
        first = await anext(lines)
        assert first.startswith("data: "), first
        delta = msgpack.unpackb(base64.b64decode(first[6:]))
        assert (delta["kind"], delta["seq"]) == ("snapshot", 3)
        assert delta["state"]


async def test_history_and_reads_at_a_seq_of_an_evicted_crdt(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    h = await issue(client)
    for i in range(5):
        await op(client, h, "rg:doc", {"op": "insert", "index": i, "text": str(i)})
    await _evict_all(server)
    server.app.residency.budget_bytes = 1 << 30
    page = (await client.get(f"{BASE}/rg:doc/history", headers=h)).json()
    assert [o["seq"] for o in page["ops"]] == [5, 4, 3, 2, 1]
    await _evict_all(server)
    server.app.residency.budget_bytes = 1 << 30
    past = (await client.get(f"{BASE}/rg:doc?at=3", headers=h)).json()
    assert past["value"] == ["0", "1", "2"]


async def test_listing_covers_evicted_crdts_in_id_order(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    h = await issue(client, admin=True)
    ids = [f"gc:{i:02d}" for i in range(10)] + ["or:x", "plain"]
    for crdt_id in reversed(ids):
        body: dict[str, Any] = (
            {"op": "increment"}
            if crdt_id.startswith("gc:")
            else {"op": "add", "element": 1, "type": "orset"}
        )
        assert (await op(client, h, crdt_id, body)).status_code == 200
    await op(client, h, "gc:00", {"op": "increment"})
    await op(client, h, "gc:zz", {"op": "increment"})
    assert (await client.delete(f"{BASE}/gc:zz", headers=h)).status_code == 204
    await _evict_all(server)

    async def listing(query: str) -> dict[str, Any]:
        r = await client.get(f"{BASE}?{query}", headers=h)
        assert r.status_code == 200, r.text
        result: dict[str, Any] = r.json()
        return result

    page = await listing("limit=4")
    assert page["crdts"] == [
        {"id": "gc:00", "type": "gcounter", "seq": 2},
        {"id": "gc:01", "type": "gcounter", "seq": 1},
        {"id": "gc:02", "type": "gcounter", "seq": 1},
        {"id": "gc:03", "type": "gcounter", "seq": 1},
    ]
    seen = [item["id"] for item in page["crdts"]]
    while page["next"] is not None:
        page = await listing(f"limit=4&cursor={page['next']}")
        seen += [item["id"] for item in page["crdts"]]
    assert seen == ids
    # Exactly a full last page: no cursor.
    last = await listing("limit=4&cursor=gc:07")
    assert [i["id"] for i in last["crdts"]] == ["gc:08", "gc:09", "or:x", "plain"]
    assert last["next"] is None
    assert [i["id"] for i in (await listing("prefix=gc:0&cursor=gc:05"))["crdts"]] == [
        "gc:06",
        "gc:07",
        "gc:08",
        "gc:09",
    ]
    assert (await listing("prefix=or:"))["crdts"] == [{"id": "or:x", "type": "orset", "seq": 1}]
    # Only what the token may read, and a cursor only when more follows.
    narrow = await issue(client, read=["gc:01", "or:*"], write=[])
    r = (await client.get(f"{BASE}?limit=1", headers=narrow)).json()
    assert ([i["id"] for i in r["crdts"]], r["next"]) == (["gc:01"], "gc:01")
    r = (await client.get(f"{BASE}?limit=1&cursor=gc:01", headers=narrow)).json()
    assert ([i["id"] for i in r["crdts"]], r["next"]) == (["or:x"], None)
    assert (await client.get(f"{BASE}?limit={MAX_LIST_LIMIT + 1}", headers=h)).status_code == 400


async def test_a_restart_after_evictions_keeps_everything(make_server: Any, tmp_path: Any) -> None:
    data_dir = tmp_path / "restart"
    server = await make_server(data_dir=data_dir)
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        await _write_all(client, h)
        before = await _reads(client, h)
        await _evict_all(server)
        # A snapshot now holds none of them: they live in the history files.
        store = server.app.store
        assert isinstance(store, FileStore)
        await store.compact_now()
        await op(client, h, "gc:late", {"op": "increment"})
    await server.server.shutdown()
    again = await make_server(data_dir=data_dir)
    async with httpx.AsyncClient(base_url=again.url) as client:
        assert len(again.app.engine) <= 1
        assert await _reads(client, h) == before
        r = await op(client, h, "gc:c", {"op": "increment", "op_id": "gc:c-0"})
        assert r.json()["duplicate"] is True
        assert (await client.get(f"{BASE}/gc:late", headers=h)).json()["value"] == 1


UPDATES = 12
"""8.4 MB of text. A CRDT is read back from its newest checkpoint and the
records after it; checkpoints fall where the records since the last one
outweigh the state: after 5 updates (3.5 MB), then after 11 (7.7 MB), past
MAX_UPDATE_BYTES."""


async def test_a_yjs_document_merged_past_one_updates_limit_loads_back(
    make_server: Any, tmp_path: Any
) -> None:
    """A document is bounded by SERVICE_MAX_CRDT_BYTES, not by the 4 MiB that
    bounds one client's update: merged from updates of 700 KB (each within
    the body limit), its state is past MAX_UPDATE_BYTES, and it still comes
    back from its checkpoint after an eviction and after a restart."""
    data_dir = tmp_path / "big-ydoc"
    server = await make_server(data_dir=data_dir)
    doc: Doc[Any] = Doc(client_id=9)
    text = doc.get("content", type=Text)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        h = await issue(client)
        seen = doc.get_state()
        for i in range(UPDATES):
            text.insert(len(text), random.Random(i).randbytes(350_000).hex())
            update = doc.get_update(seen)
            seen = doc.get_state()
            r = await op(
                client, h, "yd:big", {"op": "update", "update": base64.b64encode(update).decode()}
            )
            assert r.status_code == 200, r.text
        expected = str(text)
        store = server.app.store
        assert isinstance(store, FileStore)
        await store.compact_now()  # and in a snapshot
        state = (await client.get(f"{BASE}/yd:big", headers=h)).json()["value"]
        assert len(base64.b64decode(state)) > MAX_UPDATE_BYTES
        assert await _evict_all(server) == 0
        server.app.residency.budget_bytes = 1 << 30
        back = (await client.get(f"{BASE}/yd:big", headers=h)).json()["value"]
        assert back == state
    await server.server.shutdown()
    again = await make_server(data_dir=data_dir)
    async with httpx.AsyncClient(base_url=again.url, timeout=30) as client:
        r = await client.get(f"{BASE}/yd:big", headers=h)
        assert r.status_code == 200, r.text[:300]
        replica: Doc[Any] = Doc()
        replica.apply_update(base64.b64decode(r.json()["value"]))
        assert str(replica.get("content", type=Text)) == expected


async def test_a_caller_that_waited_on_anothers_load_gets_a_resident_crdt(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    """Two callers need one evicted CRDT: the first reads it from the store,
    the second waits for that load and resumes steps later. An eviction pass
    that lets the CRDT go in between must not leave the second with nothing:
    an op would then start a new life over the stored one (every earlier op
    lost, on disk too)."""
    h = await issue(client)
    for _ in range(5):
        assert (await op(client, h, "pn:x", {"op": "increment"})).status_code == 200
    epoch = (await client.get(f"{BASE}/pn:x", headers=h)).json()["epoch"]
    await _evict_all(server)
    app = server.app
    residency = app.residency
    store = app.store
    assert isinstance(store, FileStore)
    principal = app.auth.authenticate(h["authorization"], "app")
    # While a compaction holds the history, a load goes to the I/O thread:
    # it takes a while, and the second caller waits for it.
    lock = store._history.lock
    await lock.acquire()
    first = asyncio.create_task(residency.ensure("app", "pn:x"))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(
        app.service.apply_ops("app", "pn:x", {"op": "increment"}, principal, "http")
    )
    await asyncio.sleep(0.01)
    assert not first.done() and not second.done()
    lock.release()
    loaded = await first
    # An eviction pass (its barrier long returned: nothing changed since the
    # load) lets the CRDT go before the waiter resumes.
    assert loaded is not None and not second.done()
    residency.let_go(residency.candidates())
    assert app.engine.get("app", "pn:x") is None
    result = await second
    assert result.seq == 6
    read = (await client.get(f"{BASE}/pn:x", headers=h)).json()
    assert (read["value"], read["seq"], read["epoch"]) == (6, 6, epoch)


async def _until(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not predicate():
            await asyncio.sleep(0.005)


async def _send_to_reset(port: int, request: bytes) -> asyncio.StreamWriter:
    """Send ``request`` on a connection of its own, to be reset (an RST, with
    ``writer.transport.abort()``: the server cancels the request's work)."""
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.write(request)
    await writer.drain()
    return writer


async def test_a_load_whose_caller_went_away_still_serves_those_waiting_for_it(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    """The request that started reading an evicted CRDT is cancelled (its
    client reset the connection): the requests that waited for that read
    are answered, not left hanging."""
    h = await issue(client)
    for _ in range(3):
        await op(client, h, "pn:x", {"op": "increment"})
    await _evict_all(server)
    server.app.residency.budget_bytes = 1 << 30
    store = server.app.store
    assert isinstance(store, FileStore)
    # While a compaction holds the history, the load waits for it.
    lock = store._history.lock
    await lock.acquire()
    try:
        request = (
            f"GET {BASE}/pn:x HTTP/1.1\r\nHost: t\r\nauthorization: {h['authorization']}\r\n\r\n"
        ).encode()
        gone = await _send_to_reset(server.port, request)
        await _until(lambda: ("app", "pn:x") in server.app.residency._loading)
        read = asyncio.create_task(client.get(f"{BASE}/pn:x", headers=h))
        write = asyncio.create_task(op(client, h, "pn:x", {"op": "increment"}))
        await asyncio.sleep(0.1)  # both wait for that load
        gone.transport.abort()
        await asyncio.sleep(0.1)
    finally:
        lock.release()
    async with asyncio.timeout(5):
        r, w = await read, await write
    assert (r.status_code, r.json()["value"]) == (200, 3), r.text
    assert (w.status_code, w.json()["seq"]) == (200, 4), w.text


async def test_crdts_pinned_past_the_budget_do_not_start_a_pass_per_op(
    make_server: Any,
) -> None:
    """Subscribers pin more than the budget: a pass can free nothing, and one
    per op would scan every resident CRDT for nothing (a third of the op
    rate with 5,000 subscribed counters). After a fruitless pass the next
    waits for growth past the pass's headroom, or for the retry."""
    server = await make_server(memory_budget_mb=4 / 1024)  # about 3 counters
    residency = server.app.residency
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        token = h["authorization"].split()[1]
        async with connect(ws_url(server, token, ns="app"), proxy=None, compression=None) as ws:
            ids = [f"gc:{i}" for i in range(10)]
            for crdt_id in ids:
                await ws_op(ws, crdt_id, {"op": "increment"})
                await ws.send(msgpack.packb({"kind": "subscribe", "id": crdt_id}))
            engine = server.app.engine
            assert engine.resident_bytes > residency.budget_bytes
            passes = residency.stats.passes
            for i in range(50):
                answer = await ws_op(ws, ids[i % 10], {"op": "increment"}, ref=i)
                assert answer["kind"] == "ack", answer
            assert residency.stats.passes - passes <= 2
            assert len(engine) == 10  # all pinned, all kept
            # Once the subscribers leave, the next op's pass brings it under.
            await ws.close()
        await asyncio.sleep(RETRY_S + 0.1)
        await op(client, h, "gc:new", {"op": "increment"})
        await _until(lambda: engine.resident_bytes <= residency.budget_bytes)


async def test_return_state_answers_the_state_of_a_crdt_let_go_meanwhile(
    make_server: Any,
) -> None:
    """``?return=state`` reads the CRDT once its ops are durable; an eviction
    pass that chose it meanwhile (it waits for the same durability) could let
    it go first, and the answer said ``"state": null`` for a CRDT that exists.
    A text larger than the whole budget starts a pass with every op."""
    server = await make_server(memory_budget_mb=4 / 1024)
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        text = "x" * 6000
        for i in range(20):
            r = await client.post(
                f"{BASE}/rg:big/ops?return=state",
                headers=h,
                json={"op": "insert", "index": 0, "text": "ab" if i else text},
            )
            assert r.status_code == 200, r.text
            state = r.json()["state"]
            assert state is not None, (i, r.json())
            assert len(state["value"]) == len(text) + 2 * i, i
        assert server.app.residency.stats.passes > 0  # it was chosen, and stayed
