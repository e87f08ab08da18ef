"""PostgresStore's group commit: requests that arrive together commit together.

In-process nodes on the suite's own PostgreSQL, driven through the service
(the op path HTTP and WebSocket share).
"""

from __future__ import annotations

import asyncio
import base64
import random
import time
from typing import Any

import msgpack
import psycopg
import pytest

from syncd.errors import ApiError
from tests.store.pgnodes import (
    NS,
    Recorder,
    StartNode,
    allow_inserts,
    eventually,
    full,
    load,
    op,
    refuse_inserts,
    settled,
)

pytestmark = pytest.mark.timeout(60)


async def outcomes(*calls: Any) -> list[Any]:
    return list(await asyncio.gather(*calls, return_exceptions=True))


async def test_concurrent_requests_share_transactions(start_node: StartNode) -> None:
    a = await start_node("a")
    await op(a, "gc:warm", {"op": "increment"})
    before = a.store.stats.batches
    results = await outcomes(*(op(a, f"gc:{i % 64}", {"op": "increment"}) for i in range(512)))
    assert all(not isinstance(r, BaseException) for r in results)
    assert sorted(r.seq for r in results) == sorted(list(range(1, 9)) * 64)
    batches = a.store.stats.batches - before
    assert 1 <= batches < 512 // 4  # many requests per transaction
    for i in range(64):
        assert a.engine.read(NS, f"gc:{i}")["value"] == 8  # type: ignore[index]


async def test_a_batch_is_bounded_and_the_rest_follow_at_once(start_node: StartNode) -> None:
    a = await start_node("a", max_batch_writes=4)
    await op(a, "gc:warm", {"op": "increment"})
    before = a.store.stats.batches
    results = await outcomes(*(op(a, f"gc:{i % 3}", {"op": "increment"}) for i in range(40)))
    assert all(not isinstance(r, BaseException) for r in results)
    assert a.store.stats.batches - before >= 10  # 40 requests, at most 4 per transaction
    assert sum(a.engine.read(NS, f"gc:{i}")["value"] for i in range(3)) == 40  # type: ignore[index]


async def test_one_bad_op_never_sinks_its_batch(start_node: StartNode) -> None:
    a = await start_node("a")
    await op(a, "rg:doc", {"op": "insert", "index": 0, "text": "ab"})
    await op(a, "gc:n", {"op": "increment"})
    before = a.store.stats.batches
    bad_index = op(a, "rg:doc", {"op": "delete", "index": 99, "count": 1})  # checked in apply()
    wrong_client = op(a, "gc:n", {"op": "increment", "client_id": 424242})  # forbidden in apply()
    good = [op(a, "gc:n", {"op": "increment"}) for _ in range(10)]
    good += [op(a, "rg:doc", {"op": "insert", "index": 0, "text": "x"}) for _ in range(5)]
    results = await outcomes(bad_index, *good, wrong_client)
    assert isinstance(results[0], ApiError) and results[0].status == 400
    assert isinstance(results[-1], ApiError) and results[-1].status == 403
    assert all(not isinstance(r, BaseException) for r in results[1:-1])
    assert a.store.stats.batches - before <= 2  # all of it rode one or two transactions
    assert a.engine.read(NS, "gc:n")["value"] == 11  # type: ignore[index]
    b = await start_node("b")  # what the database holds
    await load(b, "gc:n", "rg:doc")
    assert full(b, "gc:n") == full(a, "gc:n")
    assert full(b, "rg:doc") == full(a, "rg:doc")


async def test_a_failed_batch_answers_503_to_all_and_every_crdt_is_made_right(
    start_node: StartNode, pg_url: str
) -> None:
    a = await start_node("a")
    ids = ["gc:f1", "or:f2", "rg:f3"]
    first = [
        {"op": "increment"},
        {"op": "add", "element": "kept"},
        {"op": "insert", "index": 0, "text": "k"},
    ]
    recorders = [Recorder(a, crdt_id) for crdt_id in ids]
    for crdt_id, body in zip(ids, first, strict=True):
        await op(a, crdt_id, body)
    states = {crdt_id: full(a, crdt_id) for crdt_id in ids}
    refuse_inserts(pg_url)
    later = [
        {"op": "increment"},
        {"op": "add", "element": "lost"},
        {"op": "insert", "index": 0, "text": "l"},
    ]
    results = await outcomes(
        *(op(a, c, b) for c, b in zip(ids, later, strict=True) for _ in range(3))
    )
    assert {r.status for r in results if isinstance(r, ApiError)} == {503}
    assert len([r for r in results if isinstance(r, ApiError)]) == 9
    # Memory was ahead: each CRDT is read back from the table, without the failed ops,
    # and its subscribers never saw them.
    for crdt_id in ids:
        await eventually(lambda c=crdt_id: full(a, c) == states[c])  # type: ignore[misc]
    assert [r.op_seqs() for r in recorders] == [[1], [1], [1]]
    assert all(len(r.deltas) == 1 for r in recorders)
    allow_inserts(pg_url)
    await eventually(lambda: a.ready)
    again = await op(a, "gc:f1", {"op": "increment"})
    assert again.seq == 2
    await eventually(lambda: recorders[0].op_seqs() == [1, 2])


def crdt_rows(url: str) -> dict[str, tuple[int, bool]]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT id, seq, deleted FROM crdts WHERE ns = %s", (NS,)).fetchall()
    return {crdt_id: (seq, deleted) for crdt_id, seq, deleted in rows}


async def test_a_batch_is_one_transaction_that_leaves_nothing_when_it_writes_nothing(
    start_node: StartNode, pg_url: str
) -> None:
    """A batch's statements are one implicit transaction (no BEGIN or COMMIT):
    a batch of refusals, or one whose write fails, leaves no trace of the rows
    it locked (not even a placeholder for a CRDT it would have created), and
    one that commits leaves all of it."""
    a = await start_node("a")
    await op(a, "gc:kept", {"op": "increment"})
    refused = await outcomes(
        op(a, "gc:never", {"op": "increment", "amount": -1}),
        op(a, "gc:kept", {"op": "increment", "amount": "x"}),
    )
    assert {r.status for r in refused if isinstance(r, ApiError)} == {400}
    assert crdt_rows(pg_url) == {"gc:kept": (1, False)}
    refuse_inserts(pg_url)
    failed = await outcomes(
        op(a, "gc:lost", {"op": "increment"}), op(a, "gc:kept", {"op": "increment"})
    )
    assert {r.status for r in failed if isinstance(r, ApiError)} == {503}
    assert crdt_rows(pg_url) == {"gc:kept": (1, False)}
    allow_inserts(pg_url)
    await eventually(lambda: a.ready)
    done = await outcomes(
        op(a, "gc:new", {"op": "increment"}), op(a, "gc:kept", {"op": "increment"})
    )
    assert not any(isinstance(r, BaseException) for r in done)
    assert crdt_rows(pg_url) == {"gc:kept": (2, False), "gc:new": (1, False)}


async def test_a_contended_batch_holds_its_rows_until_it_commits(
    start_node: StartNode, pg_url: str
) -> None:
    """The careful path reads the locks' results in the middle of its pipeline:
    the rows stay locked until the commit (a Sync there would commit the locks
    alone and let another transaction in). Another connection asking for the
    row's lock meanwhile waits for the batch's commit, then sees its seq."""
    a = await start_node("a")
    b = await start_node("b")
    await op(a, "gc:c", {"op": "increment"})
    await load(b, "gc:c")
    await op(b, "gc:c", {"op": "increment"})  # written elsewhere: a's next batch is careful
    await eventually(lambda: (full(a, "gc:c") or {}).get("seq") == 2)
    key = (NS, "gc:c")
    cluster = a.cluster
    assert cluster is not None and cluster.contended(key)
    seen: list[int] = []
    gate = asyncio.Event()
    original = cluster.bring_up

    async def bring_up(rows: Any, key_: Any, row: Any) -> None:
        await original(rows, key_, row)
        if key_ == key:
            gate.set()
            await asyncio.sleep(0.3)  # the batch holds its row locks meanwhile

    cluster.bring_up = bring_up  # type: ignore[method-assign]

    def lock_row() -> None:
        with psycopg.connect(pg_url, autocommit=True) as conn, conn.transaction():
            (seq,) = conn.execute(  # type: ignore[misc]
                "SELECT seq FROM crdts WHERE ns = %s AND id = %s FOR UPDATE", key
            ).fetchone()
            seen.append(seq)

    writing = asyncio.create_task(op(a, "gc:c", {"op": "increment"}))
    await gate.wait()
    await asyncio.to_thread(lock_row)
    result = await writing
    assert result.seq == 3
    assert seen == [3]  # it waited for the commit


async def test_two_nodes_writing_the_same_crdts_in_any_order_never_deadlock(
    start_node: StartNode,
) -> None:
    a = await start_node("a")
    b = await start_node("b")
    ids = [f"gc:d{i}" for i in range(8)]
    rng = random.Random(7)
    calls = []
    for _ in range(300):
        node = a if rng.random() < 0.5 else b
        calls.append(op(node, rng.choice(ids), {"op": "increment"}))
    results = await outcomes(*calls)
    assert all(not isinstance(r, BaseException) for r in results), [
        r for r in results if isinstance(r, BaseException)
    ][:3]
    seqs: dict[str, set[int]] = {}
    for result in results:
        record = result.records[0]
        assert record["seq"] not in seqs.setdefault(record["id"], set())
        seqs[record["id"]].add(record["seq"])
    for crdt_id in ids:
        await eventually(lambda c=crdt_id: full(a, c) == full(b, c))  # type: ignore[misc]
    assert sum(a.engine.read(NS, c)["value"] for c in ids) == 300  # type: ignore[index]


async def test_a_batch_notifies_in_as_few_payloads_as_fit(
    start_node: StartNode, pg_url: str
) -> None:
    a = await start_node("a")
    await op(a, "gc:warm", {"op": "increment"})
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as listener:
        await listener.execute(f'LISTEN "{a.store.channel}"')  # type: ignore[attr-defined]
        before = a.store.stats.batches
        results = await outcomes(*(op(a, f"gc:m{i % 20}", {"op": "increment"}) for i in range(200)))
        assert all(not isinstance(r, BaseException) for r in results)
        batches = a.store.stats.batches - before
        seen: list[tuple[str, int]] = []
        payloads = 0
        async for notify in listener.notifies(timeout=1.0):
            payloads += 1
            _sender, kind, body = msgpack.unpackb(base64.b64decode(notify.payload), raw=False)
            assert kind == "r"
            for raw in body:
                record = msgpack.unpackb(raw, raw=False)
                seen.append((record["id"], record["seq"]))
    assert sorted(seen) == sorted((f"gc:m{i}", s) for i in range(20) for s in range(1, 11))
    # A payload holds up to 8000 bytes: dozens of small records, never one each;
    # a batch of up to 200 such records needs at most a few.
    assert batches <= payloads <= 5 * batches
    assert payloads <= 200 // 10


async def test_a_lone_client_never_waits_for_company(start_node: StartNode) -> None:
    a = await start_node("a", gather_wait_s=0.5)
    await op(a, "gc:solo", {"op": "increment"})
    started = time.monotonic()
    for _ in range(10):
        await op(a, "gc:solo", {"op": "increment"})
    assert time.monotonic() - started < 2.5  # never the 0.5 s gather wait each


async def test_a_batch_waits_for_the_callers_it_just_answered(start_node: StartNode) -> None:
    a = await start_node("a", gather_wait_s=0.5)
    await op(a, "gc:w", {"op": "increment"})

    async def client(n: int) -> None:
        for _ in range(n):
            await op(a, f"gc:g{n}", {"op": "increment"})
            await asyncio.sleep(0.01)  # a client's turnaround, shorter than the wait

    before = a.store.stats.batches
    await asyncio.gather(*(client(5) for _ in range(8)))
    # Eight callers in step: each round's eight requests share one transaction
    # instead of splitting into ever smaller ones.
    assert a.store.stats.batches - before <= 5 + 2


async def test_an_optimistic_batch_that_lost_a_race_is_done_again_right(
    start_node: StartNode,
) -> None:
    a = await start_node("a")
    b = await start_node("b")
    b.store.channel = "nowhere"  # type: ignore[attr-defined]  # a never hears of b's ops
    rec = Recorder(a, "gc:r")
    await op(a, "gc:r", {"op": "increment"})
    await load(b, "gc:r")
    await eventually(lambda: full(b, "gc:r") is not None)
    await op(b, "gc:r", {"op": "increment", "amount": 10})  # seq 2, unknown to a
    conflicts = a.cluster.stats.conflicts  # type: ignore[union-attr]
    result = await op(a, "gc:r", {"op": "increment", "amount": 100})
    assert result.seq == 3  # numbered after b's op, read under the lock on the retry
    assert a.cluster.stats.conflicts == conflicts + 1  # type: ignore[union-attr]
    assert a.engine.read(NS, "gc:r")["value"] == 111  # type: ignore[index]
    await eventually(lambda: rec.op_seqs() == [1, 2, 3])  # b's op, then a's, once each

    # b ends the life and starts another; a, still deaf, writes to the old one.
    await b.service.delete(NS, "gc:r")
    await op(b, "gc:r", {"op": "increment"})
    a.cluster._remote_at.clear()  # type: ignore[union-attr]  # as if a second had passed
    reborn = await op(a, "gc:r", {"op": "increment", "amount": 5})
    assert reborn.seq == 2
    assert a.cluster.stats.conflicts == conflicts + 2  # type: ignore[union-attr]
    assert a.engine.read(NS, "gc:r")["value"] == 6  # type: ignore[index]
    assert full(a, "gc:r")["epoch"] == full(b, "gc:r")["epoch"]  # type: ignore[index]


async def test_the_cluster_counters_are_exported(start_node: StartNode) -> None:
    a = await start_node("a")
    b = await start_node("b")
    await settled(b)  # listening
    Recorder(b, "gc:x")  # b follows what its subscribers wait for
    await op(a, "gc:x", {"op": "increment"})
    await eventually(lambda: full(b, "gc:x") is not None)
    text = b.metrics.render().decode()
    notices = [
        line
        for line in text.splitlines()
        if line.startswith("service_cluster_notifications_total ")
    ]
    assert notices and float(notices[0].split()[1]) >= 1
    assert "service_cluster_conflicts_total 0.0" in text
    assert "service_store_commits_total" in a.metrics.render().decode()
