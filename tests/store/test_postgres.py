"""PostgresStore against the real PostgreSQL: storage, restarts, two nodes, faults.

Nodes here are in-process ``App`` objects driven through the service (the op
path HTTP and WebSocket share); the subprocess cluster is in tests/cluster.
This module has a database of its own and every test a schema of its own.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from syncd.auth import ROOT
from syncd.catchup import initial_deltas
from syncd.errors import ApiError
from syncd.history import Writer
from syncd.store.history_index import Retention
from syncd.store.pg_schema import MIGRATIONS, SchemaTooNewError, migrate
from syncd.store.postgres import PostgresStore
from tests.cluster.pgdb import database_url, set_connections_allowed
from tests.conftest import base_settings
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
    sql_conn,
)

pytestmark = pytest.mark.timeout(60)

EVERY_TYPE: list[tuple[str, list[dict[str, Any]]]] = [
    ("gc:hits", [{"op": "increment", "amount": 5}, {"op": "increment", "op_id": "g1"}]),
    ("pn:score", [{"op": "increment", "amount": 7}, {"op": "decrement", "amount": 2}]),
    (
        "or:tags",
        [
            {"op": "add", "element": "x"},
            {"op": "add", "element": {"k": [1, 2]}},
            {"op": "remove", "element": "x"},
        ],
    ),
    (
        "lw:title",
        [{"op": "set", "value": {"t": "hello"}}, {"op": "set", "value": "bye", "op_id": "l1"}],
    ),
    ("pr:room", [{"op": "update", "data": {"cursor": 3}, "ttl_ms": 300000}]),
    (
        "rg:doc",
        [
            {"op": "insert", "index": 0, "text": "hello"},
            {"op": "delete", "index": 1, "count": 2},
            {"op": "insert", "index": 0, "values": [1, None]},
        ],
    ),
    (
        "tr:outline",
        [
            {"op": "add", "id": "a", "parent": "root", "data": {"n": 1}},
            {"op": "add", "id": "b", "parent": "a"},
            {"op": "move", "id": "b", "parent": "root", "pos": "0"},
            {"op": "update", "id": "a", "data": {"n": 2}},
        ],
    ),
    ("plain", [{"op": "increment", "type": "gcounter", "amount": 3}]),
]


# -- schema ------------------------------------------------------------------------


async def test_migrations_are_versioned_ordered_and_applied_once(pg_url: str) -> None:
    known = MIGRATIONS[-1][0]
    extra = (
        (known + 2, ("ALTER TABLE extra ADD COLUMN b int",)),
        (known + 1, ("CREATE TABLE extra (a int)",)),
    )
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        assert await migrate(conn) == known
        assert await migrate(conn) == known
        assert (
            await migrate(conn, (*MIGRATIONS, *extra)) == known + 2
        )  # the lower first whatever the order given
        assert await migrate(conn, (*MIGRATIONS, *extra)) == known + 2
        cur = await conn.execute("SELECT version FROM schema_version ORDER BY version")
        assert [v for (v,) in await cur.fetchall()] == list(range(1, known + 3))
        cur = await conn.execute("SELECT b FROM extra")
        assert await cur.fetchall() == []
        with pytest.raises(SchemaTooNewError, match=f"version {known + 2}"):
            await migrate(conn)
        with pytest.raises(ValueError, match="distinct"):
            await migrate(conn, (*MIGRATIONS, (1, ("SELECT 1",))))


async def test_the_publication_is_created_or_extended_to_cover_ops(pg_url: str) -> None:
    name = "p_" + secrets.token_hex(4)
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute("CREATE TABLE other (a int)")
        await conn.execute(f"CREATE PUBLICATION {name} FOR TABLE other")
        await migrate(conn, publication=name)
        await migrate(conn, publication=name)
        cur = await conn.execute(
            "SELECT tablename FROM pg_publication_tables WHERE pubname = %s ORDER BY 1", (name,)
        )
        assert [t for (t,) in await cur.fetchall()] == ["ops", "other"]
        await conn.execute(f"DROP PUBLICATION {name}")


async def test_nodes_migrating_at_once_apply_each_version_once(pg_url: str) -> None:
    conns = [await psycopg.AsyncConnection.connect(pg_url, autocommit=True) for _ in range(4)]
    try:
        known = MIGRATIONS[-1][0]
        assert await asyncio.gather(*(migrate(c) for c in conns)) == [known] * 4
        cur = await conns[0].execute("SELECT count(*) FROM schema_version")
        assert await cur.fetchone() == (known,)
    finally:
        for conn in conns:
            await conn.close()


# -- storage and restarts ------------------------------------------------------------


@pytest.mark.parametrize("snapshot_every", [1000, 2])
async def test_every_type_is_stored_and_restored(
    start_node: StartNode, snapshot_every: int
) -> None:
    a = await start_node("a", snapshot_every=snapshot_every, ops_retained=1)
    for crdt_id, ops in EVERY_TYPE:
        for body in ops:
            await op(a, crdt_id, body)
    await op(a, "or:tags", [{"op": "add", "element": i, "op_id": f"batch{i}"} for i in range(5)])
    before = {crdt_id: full(a, crdt_id) for crdt_id, _ in EVERY_TYPE}
    views = {crdt_id: a.engine.read(NS, crdt_id) for crdt_id, _ in EVERY_TYPE}
    await a.close()

    b = await start_node("b", snapshot_every=snapshot_every, ops_retained=1)
    assert len(b.engine) == 0  # a node loads no CRDT at start
    await load(b, *(crdt_id for crdt_id, _ in EVERY_TYPE))
    assert {crdt_id: full(b, crdt_id) for crdt_id, _ in EVERY_TYPE} == before
    for crdt_id, _ in EVERY_TYPE:
        if not crdt_id.startswith("pr:"):  # presence views depend on the clock
            assert b.engine.read(NS, crdt_id) == views[crdt_id]
    # op_ids survive the restart (in the records, or in the snapshot entries).
    again = await op(b, "gc:hits", {"op": "increment", "op_id": "g1"})
    assert again.duplicate and again.seq == 2
    again = await op(b, "or:tags", [{"op": "add", "element": 3, "op_id": "batch3"}])
    assert again.duplicate and again.applied == 1  # as the first answer said
    assert full(b, "gc:hits") == before["gc:hits"]
    if snapshot_every == 2:
        with sql_conn(b.settings.database_url or "") as conn:
            snaps = conn.execute("SELECT count(*) FROM snapshots").fetchone()
            assert snaps is not None and snaps[0] >= 5


async def test_snapshots_prune_old_ops_and_replays_read_the_table(start_node: StartNode) -> None:
    no_history = {"history_retention": Retention(ops=0)}
    a = await start_node("a", snapshot_every=5, ops_retained=3, settings=no_history)
    for _ in range(12):
        await op(a, "gc:c", {"op": "increment"})
    entry = a.engine.get(NS, "gc:c")
    assert entry is not None
    with sql_conn(a.settings.database_url or "") as conn:
        assert conn.execute("SELECT seq FROM snapshots").fetchall() == [(10,)]
        # The ops after the newest checkpoint at or before 12 - 3 (the one at 5)
        # stay: replays need 3, rebuilding a state needs a base.
        assert [s for (s,) in conn.execute("SELECT seq FROM ops ORDER BY seq")] == list(
            range(6, 13)
        )
    replay = await a.store.ops_since(NS, "gc:c", entry.epoch, 9)
    assert replay is not None and [r["seq"] for r in replay] == [10, 11, 12]
    assert await a.store.ops_since(NS, "gc:c", entry.epoch, 2) is None  # pruned: snapshot instead
    assert await a.store.ops_since(NS, "gc:c", "other-epoch", 9) is None
    state = full(a, "gc:c")
    await a.close()
    b = await start_node("b", snapshot_every=5, ops_retained=3, settings=no_history)
    await load(b, "gc:c")
    assert full(b, "gc:c") == state


async def test_wal_last_seq_is_the_ops_identity(start_node: StartNode) -> None:
    a = await start_node("a")
    assert a.wal_last_seq == 0
    await op(a, "gc:w", [{"op": "increment"}] * 3)
    assert a.wal_last_seq == 3
    b = await start_node("b")
    assert b.wal_last_seq == 3


async def test_open_gives_up_on_an_unreachable_server(tmp_path: Path) -> None:
    settings = base_settings(tmp_path, database_url="postgresql://root@127.0.0.1:1/x", node_id="a")
    store = PostgresStore(settings.database_url or "", open_timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        await store.open()
    assert time.monotonic() - started < 5
    with pytest.raises(ValueError, match="max_batch_writes"):
        PostgresStore(settings.database_url or "", max_batch_writes=0)


# -- two nodes -------------------------------------------------------------------------


async def test_two_nodes_never_hand_out_the_same_seq(start_node: StartNode) -> None:
    a = await start_node("a")
    b = await start_node("b")
    rec_a, rec_b = Recorder(a, "gc:shared"), Recorder(b, "gc:shared")
    results = await asyncio.gather(
        *(op(node, "gc:shared", {"op": "increment"}) for _ in range(20) for node in (a, b))
    )
    assert sorted(r.seq for r in results) == list(range(1, 41))
    await eventually(lambda: rec_a.op_seqs()[-1:] == [40] and rec_b.op_seqs()[-1:] == [40])
    assert rec_a.op_seqs() == list(range(1, 41))
    assert rec_b.op_seqs() == list(range(1, 41))
    assert full(a, "gc:shared") == full(b, "gc:shared")
    assert a.engine.read(NS, "gc:shared")["value"] == 40  # type: ignore[index]
    with sql_conn(a.settings.database_url or "") as conn:
        assert conn.execute("SELECT seq FROM crdts").fetchall() == [(40,)]


async def test_one_client_on_two_nodes_never_mints_the_same_rga_id(start_node: StartNode) -> None:
    """The same client id (here the admin's) typing into one document through two
    nodes at once: each node catches the document up under its row lock before
    applying, so element counters continue past the other node's, never repeat."""
    a = await start_node("a")
    b = await start_node("b")
    results = await asyncio.gather(
        *(
            op(node, "rg:doc", {"op": "insert", "index": 0, "text": ch})
            for ch in "abcdefghijklmnopqrst"
            for node in (a, b)
        )
    )
    ids = [i for r in results for i in r.extra["ids"]]
    assert len(ids) == 40 and len(set(ids)) == 40
    await eventually(lambda: full(a, "rg:doc") == full(b, "rg:doc"))
    text = a.engine.read(NS, "rg:doc")["text"]  # type: ignore[index]
    assert sorted(text) == sorted("abcdefghijklmnopqrst" * 2)


async def test_op_id_is_idempotent_across_nodes(start_node: StartNode) -> None:
    a = await start_node("a")
    b = await start_node("b")
    first = await op(a, "rg:t", {"op": "insert", "index": 0, "text": "ab", "op_id": "once"})
    repeat = await op(b, "rg:t", {"op": "insert", "index": 0, "text": "ab", "op_id": "once"})
    assert repeat.duplicate and repeat.seq == first.seq and repeat.extra == first.extra
    await eventually(lambda: full(a, "rg:t") == full(b, "rg:t"))
    assert a.engine.read(NS, "rg:t")["text"] == "ab"  # type: ignore[index]


async def test_delete_ends_the_life_everywhere_and_a_new_one_starts(start_node: StartNode) -> None:
    a = await start_node("a")
    b = await start_node("b")
    rec = Recorder(b, "or:s")
    await op(a, "or:s", {"op": "add", "element": 1})
    await eventually(lambda: full(b, "or:s") is not None)
    old_epoch = b.engine.get(NS, "or:s").epoch  # type: ignore[union-attr]
    assert await a.service.delete(NS, "or:s")
    await eventually(lambda: b.engine.get(NS, "or:s") is None)
    # subscribers get the delta after the engine has it (publish_soon)
    deleted = {"kind": "deleted", "ns": NS, "id": "or:s"}
    await eventually(lambda: bool(rec.deltas) and rec.deltas[-1] == deleted)
    created = await op(b, "or:s", {"op": "add", "element": 2})
    assert created.seq == 1 and created.created
    assert a.engine.get(NS, "or:s") is None  # a holds no life of it now: not followed
    await load(a, "or:s")
    await eventually(lambda: full(a, "or:s") == full(b, "or:s"))
    assert a.engine.get(NS, "or:s").epoch != old_epoch  # type: ignore[union-attr]
    assert a.engine.read(NS, "or:s")["value"] == [2]  # type: ignore[index]
    assert not await b.service.delete(NS, "or:missing")


async def test_a_late_record_of_an_ended_life_is_not_resurrected(start_node: StartNode) -> None:
    a = await start_node("a")
    b = await start_node("b")
    result = await op(a, "gc:z", {"op": "increment"})
    record = dict(result.records[0])
    await load(b, "gc:z")
    await eventually(lambda: b.engine.get(NS, "gc:z") is not None)
    await a.service.delete(NS, "gc:z")
    await eventually(lambda: b.engine.get(NS, "gc:z") is None)
    # The same record arriving again by another path (the replication stream lags).
    store = b.cluster
    assert store is not None
    syncs = store.stats.syncs
    store._offer((NS, "gc:z"), ("op", record))
    await eventually(lambda: not store._pending)
    assert b.engine.get(NS, "gc:z") is None
    assert store.stats.syncs == syncs  # not held here: not even the table is asked
    # With a subscriber waiting for it, the table is asked; its row says deleted.
    Recorder(b, "gc:z")
    store._offer((NS, "gc:z"), ("op", record))
    await eventually(lambda: not store._pending)
    assert b.engine.get(NS, "gc:z") is None
    assert store.stats.syncs == syncs + 1


async def test_a_record_behind_a_commit_waits_only_if_the_engine_lacks_it(
    start_node: StartNode,
) -> None:
    """While a commit holds a CRDT, another node's record the engine has already
    (the commit read it from the table) is passed over at once; one it lacks
    waits for the lock, without a task of its own, and is applied as the lock
    is let go, without a table read."""
    a = await start_node("a")
    b = await start_node("b")
    await settled(b)  # its first catch-up does not race what follows
    first = await op(a, "gc:q", {"op": "increment"})
    await load(b, "gc:q")
    key = (NS, "gc:q")
    cluster = b.cluster
    assert cluster is not None
    syncs = cluster.stats.syncs
    async with b.store.locks.hold(key):  # type: ignore[attr-defined]  # a commit's hold
        tasks = set(cluster._tasks)
        cluster._offer(key, ("op", dict(first.records[0])))
        assert key not in cluster._pending
        await op(a, "gc:q", {"op": "increment", "amount": 5})  # b hears it meanwhile
        await eventually(lambda: key in cluster._pending)
        assert b.engine.read(NS, "gc:q")["value"] == 1  # type: ignore[index]
        assert key in cluster._parked
        assert set(cluster._tasks) <= tasks  # parked: no drain task
    # Applied by the release itself (no await in between).
    assert key not in cluster._pending and key not in cluster._parked
    assert b.engine.read(NS, "gc:q")["value"] == 6  # type: ignore[index]
    assert cluster.stats.syncs == syncs


async def test_what_a_parked_crdt_cannot_apply_is_read_from_the_table_after_the_lock(
    start_node: StartNode,
) -> None:
    """A record that does not follow what the engine holds (a gap: one
    notification was lost) parks behind the lock like any, and at release the
    CRDT is read from the table in a task: the engine ends equal to it."""
    a = await start_node("a")
    b = await start_node("b")
    await settled(b)
    await op(a, "gc:g", {"op": "increment"})
    await load(b, "gc:g")
    key = (NS, "gc:g")
    cluster = b.cluster
    assert cluster is not None
    syncs = cluster.stats.syncs
    async with b.store.locks.hold(key):  # type: ignore[attr-defined]  # a commit's hold
        await op(a, "gc:g", {"op": "increment", "amount": 2})
        third = await op(a, "gc:g", {"op": "increment", "amount": 4})
        await eventually(lambda: len(cluster._pending.get(key, ())) == 2)
        cluster._pending[key].popleft()  # seq 2 lost: seq 3 follows nothing held
        assert [item[1]["seq"] for item in cluster._pending[key]] == [third.records[0]["seq"]]
    await eventually(lambda: key not in cluster._pending)
    assert b.engine.read(NS, "gc:g")["value"] == 7  # type: ignore[index]
    assert cluster.stats.syncs == syncs + 1


async def test_a_held_crdt_without_subscribers_follows_and_a_later_subscriber_starts_current(
    start_node: StartNode,
) -> None:
    """Other nodes' records reach a CRDT this node holds with nobody subscribed
    (applied, not published); whoever subscribes later starts from them."""
    a = await start_node("a")
    b = await start_node("b")
    await op(a, "pn:f", {"op": "increment"})
    await load(b, "pn:f")
    await op(a, "pn:f", {"op": "increment", "amount": 2})
    await op(a, "pn:f", {"op": "decrement"})
    await eventually(lambda: full(b, "pn:f") == full(a, "pn:f"))
    rec = Recorder(b, "pn:f")
    epoch = b.engine.get(NS, "pn:f").epoch  # type: ignore[union-attr]
    start = await initial_deltas(b.service, NS, "pn:f", 1, epoch)
    assert [d["seq"] for d in start] == [2, 3]
    await op(a, "pn:f", {"op": "increment", "amount": 10})
    await eventually(lambda: rec.op_seqs() == [4])
    assert b.engine.read(NS, "pn:f")["value"] == 12  # type: ignore[index]


async def test_the_read_of_other_nodes_ops_is_never_a_cached_plan(start_node: StartNode) -> None:
    """A batch on CRDTs other nodes write reads their newest ops in the same
    round trip. That statement is planned each time: a plan cached while ``ops``
    was small (a new database) scans the whole table, and kept it as it grew."""
    a = await start_node("a")
    b = await start_node("b", pool_size=1)  # every statement of b's on one connection
    await op(a, "gc:c", {"op": "increment"})
    await load(b, "gc:c")
    for _ in range(8):  # past psycopg's prepare threshold (5)
        await op(a, "gc:c", {"op": "increment"})
        await eventually(lambda: full(b, "gc:c") == full(a, "gc:c"))
        await op(b, "gc:c", {"op": "increment"})  # contended: reads a's ops first
    assert b.cluster is not None and b.cluster.contended((NS, "gc:c"))
    async with b.store.pool.connection() as conn:  # type: ignore[attr-defined]
        cur = await conn.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [str(s) for (s,) in await cur.fetchall()]
    assert any("INSERT INTO crdts" in s for s in prepared)  # the others are prepared
    assert not any("JOIN ops" in s for s in prepared)


async def test_large_ops_without_wal_travel_as_references(start_node: StartNode) -> None:
    a = await start_node("a")
    b = await start_node("b")
    rec = Recorder(b, "rg:big")
    text = "x" * 20_000
    await op(a, "rg:big", {"op": "insert", "index": 0, "text": "s"})
    await op(a, "rg:big", {"op": "insert", "index": 1, "text": text})
    await eventually(lambda: rec.op_seqs() == [1, 2])
    assert b.engine.read(NS, "rg:big")["text"] == "s" + text  # type: ignore[index]
    assert b.cluster.stats.syncs >= 1  # type: ignore[union-attr]


async def test_commit_catches_up_when_notifications_were_missed(start_node: StartNode) -> None:
    a = await start_node("a")
    b = await start_node("b")
    await settled(b)
    rec = Recorder(b, "pn:p")
    await op(a, "pn:p", {"op": "increment"})
    await eventually(lambda: rec.op_seqs() == [1])
    a.store.channel = "nowhere"  # type: ignore[attr-defined]  # A's notifications are lost
    await op(a, "pn:p", [{"op": "increment"}, {"op": "decrement"}])
    await asyncio.sleep(0.1)
    assert rec.op_seqs() == [1]
    mine = await op(b, "pn:p", {"op": "increment", "amount": 10})
    assert mine.seq == 4
    await eventually(lambda: rec.op_seqs() == [1, 2, 3, 4])
    assert b.engine.read(NS, "pn:p")["value"] == 11  # type: ignore[index]


async def test_catch_up_reloads_what_differs_from_the_table(start_node: StartNode) -> None:
    a = await start_node("a")
    b = await start_node("b")
    await settled(b)
    a.store.channel = "nowhere"  # type: ignore[attr-defined]
    rec = Recorder(b, "lw:r")
    await op(a, "lw:r", {"op": "set", "value": 1})
    await op(a, "lw:r", {"op": "set", "value": 2})
    await op(a, "gc:other", {"op": "increment"})
    await asyncio.sleep(0.1)
    assert b.engine.get(NS, "lw:r") is None
    b.cluster.request_catch_up()  # type: ignore[union-attr]  # what a reconnect does
    # What b's subscribers wait for is read; what b does not hold stays unread.
    await eventually(lambda: full(b, "lw:r") == full(a, "lw:r"))
    await asyncio.sleep(0.1)
    assert b.engine.get(NS, "gc:other") is None
    # deltas reach subscribers after the engine has them (publish_soon), so wait for them too
    await eventually(lambda: rec.op_seqs() == [1, 2])


async def test_a_node_behind_pruned_ops_catches_up_from_the_snapshot(
    start_node: StartNode,
) -> None:
    no_history = {"history_retention": Retention(ops=0)}
    a = await start_node("a", snapshot_every=3, ops_retained=0, settings=no_history)
    b = await start_node("b")
    await settled(b)
    rec = Recorder(b, "gc:s")
    await op(a, "gc:s", {"op": "increment"})
    await eventually(lambda: rec.op_seqs() == [1])
    a.store.channel = "nowhere"  # type: ignore[attr-defined]
    for _ in range(6):
        await op(a, "gc:s", {"op": "increment", "amount": 2})
    with sql_conn(a.settings.database_url or "") as conn:
        assert [s for (s,) in conn.execute("SELECT seq FROM ops")] == [7]  # 2..6 pruned
    b.cluster.request_catch_up()  # type: ignore[union-attr]
    await eventually(lambda: full(b, "gc:s") == full(a, "gc:s"))
    await eventually(lambda: len(rec.deltas) >= 3)
    assert [(d["kind"], d["seq"]) for d in rec.deltas] == [("op", 1), ("snapshot", 6), ("op", 7)]


# -- faults ----------------------------------------------------------------------------


async def test_a_failed_commit_is_not_acknowledged_and_the_crdt_is_reloaded(
    start_node: StartNode, pg_url: str
) -> None:
    a = await start_node("a")
    rec = Recorder(a, "gc:f")
    await op(a, "gc:f", {"op": "increment"})
    refuse_inserts(pg_url)
    with pytest.raises(ApiError) as failed:
        await op(a, "gc:f", {"op": "increment", "amount": 100, "op_id": "retry-me"})
    assert failed.value.status == 503
    # Memory was ahead: the CRDT is read back from the table, without the failed op.
    await eventually(lambda: (full(a, "gc:f") or {}).get("seq") == 1)
    assert a.engine.read(NS, "gc:f")["value"] == 1  # type: ignore[index]
    assert rec.op_seqs() == [1]
    allow_inserts(pg_url)
    retried = await op(a, "gc:f", {"op": "increment", "amount": 100, "op_id": "retry-me"})
    assert retried.seq == 2 and not retried.duplicate
    assert a.engine.read(NS, "gc:f")["value"] == 101  # type: ignore[index]
    assert a.store.stats.failures == 1


async def test_a_failed_delete_is_503_and_the_node_goes_on_with_what_it_holds(
    start_node: StartNode, pg_url: str
) -> None:
    a = await start_node("a")
    await op(a, "gc:d", {"op": "increment"})
    await op(a, "gc:k", {"op": "increment"})
    with sql_conn(pg_url) as conn:  # the delete's update of the row fails
        conn.execute(
            "CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'refused'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse_delete BEFORE UPDATE ON crdts FOR EACH ROW"
            " WHEN (NEW.deleted) EXECUTE FUNCTION refuse_delete()"
        )
    with pytest.raises(ApiError) as failed:
        await a.service.delete(NS, "gc:d")
    assert failed.value.status == 503
    # The rows are the truth and memory was not ahead of them: the node stays
    # writable and keeps every other CRDT (it used to refuse writes and read
    # every CRDT back, as a local store whose log fell behind must).
    assert a.service.writable
    held = a.engine.get(NS, "gc:k")
    assert held is not None
    assert (await op(a, "gc:k", {"op": "increment"})).seq == 2
    assert a.engine.get(NS, "gc:k") is held
    # The CRDT the delete dropped is read back from its row, still there.
    await a.service.ensure(NS, "gc:d")
    assert a.engine.read(NS, "gc:d")["value"] == 1  # type: ignore[index]
    with sql_conn(pg_url) as conn:
        conn.execute("DROP TRIGGER refuse_delete ON crdts")
    assert await a.service.delete(NS, "gc:d")
    assert await a.service.ensure(NS, "gc:d") is None


async def test_an_unreachable_database_means_not_ready_and_503_until_it_is_back(
    start_node: StartNode, pg_db: str
) -> None:
    a = await start_node("a")
    b = await start_node("b")
    await op(a, "gc:o", {"op": "increment"})
    await load(b, "gc:o")
    await eventually(lambda: full(b, "gc:o") is not None)
    set_connections_allowed(pg_db, False)
    try:
        await eventually(lambda: not a.ready and not b.ready, timeout=5)
        with pytest.raises(ApiError) as refused:
            await op(a, "gc:o", {"op": "increment"})
        assert refused.value.status == 503
        assert await a.store.ops_since(NS, "gc:o", "e", 0) is None
    finally:
        set_connections_allowed(pg_db, True)
    await eventually(lambda: a.ready and b.ready)
    rec = Recorder(b, "gc:o")
    await op(a, "gc:o", {"op": "increment"})
    await eventually(lambda: rec.op_seqs() == [2])
    assert full(a, "gc:o") == full(b, "gc:o")


async def test_commits_on_one_node_are_serialised_per_crdt(start_node: StartNode) -> None:
    a = await start_node("a", pool_size=2)
    results = await asyncio.gather(*(op(a, f"gc:{i % 3}", {"op": "increment"}) for i in range(30)))
    assert sorted(r.seq for r in results) == sorted(list(range(1, 11)) * 3)


# -- the replication stream ------------------------------------------------------------


def slots(pg_db: str, prefix: str) -> list[tuple[str, bool]]:
    with sql_conn(database_url(pg_db)) as conn:
        rows = conn.execute(
            "SELECT slot_name, temporary FROM pg_replication_slots WHERE slot_name LIKE %s",
            (prefix + "%",),
        ).fetchall()
    return [(str(name), bool(temporary)) for name, temporary in rows]


async def test_large_ops_arrive_on_the_replication_stream(
    start_node: StartNode, pg_db: str
) -> None:
    prefix = "t" + secrets.token_hex(4)
    wal = {"wal_connstr": database_url(pg_db), "wal_slot": prefix, "wal_pub": prefix + "_pub"}
    a = await start_node("a", settings=wal)
    b = await start_node("b", settings=wal)
    clusters = [a.cluster, b.cluster]
    await eventually(lambda: all(c is not None and c.wal_streaming for c in clusters))
    assert sorted(slots(pg_db, prefix)) == [(prefix + "_a", True), (prefix + "_b", True)]
    rec = Recorder(b, "rg:big")
    await op(a, "rg:big", {"op": "insert", "index": 0, "text": "z"})
    await eventually(lambda: rec.op_seqs() == [1])
    syncs = b.cluster.stats.syncs  # type: ignore[union-attr]
    text = "y" * 50_000
    await op(a, "rg:big", {"op": "insert", "index": 0, "values": [text]})
    await eventually(lambda: rec.op_seqs() == [1, 2])
    assert b.engine.read(NS, "rg:big")["value"] == [text, "z"]  # type: ignore[index]
    assert b.cluster.stats.wal_records == 1  # type: ignore[union-attr]  # only the large one
    assert b.cluster.stats.syncs == syncs  # type: ignore[union-attr]  # applied from the stream
    await a.close()
    await b.close()
    await eventually(lambda: slots(pg_db, prefix) == [])  # temporary: gone with the session


# -- history -------------------------------------------------------------------------


async def test_history_at_and_restore_across_nodes(start_node: StartNode) -> None:
    keep = {"history_retention": Retention(ops=20)}
    a = await start_node("a", snapshot_every=10, ops_retained=0, settings=keep)
    b = await start_node("b", snapshot_every=10, ops_retained=0, settings=keep)
    await settled(b)
    values = [0]
    for i in range(1, 61):
        await op(a, "pn:c", {"op": "increment", "amount": i})
        values.append(values[-1] + i)
    await load(b, "pn:c")

    def b_has(seq: int) -> bool:
        entry = b.engine.get(NS, "pn:c")
        return entry is not None and entry.seq == seq

    await eventually(lambda: b_has(60))
    # Both nodes read the past from the database: checkpoints every 10 seqs.
    for node in (a, b):
        for seq in (40, 41, 55, 59, 60):
            view = await node.history.read_at(NS, "pn:c", seq, full=False)
            assert view["value"] == values[seq] and view["seq"] == seq
    page = await b.history.page(NS, "pn:c", None, 5)
    assert [o["seq"] for o in page["ops"]] == [60, 59, 58, 57, 56] and page["next"] == 56
    oldest = page["oldest"]
    assert 30 <= oldest <= 40  # at least 20 ops of history, not much more
    with pytest.raises(ApiError) as expired:
        await b.history.read_at(NS, "pn:c", oldest - 1, full=False)
    assert expired.value.status == 410 and expired.value.body()["oldest"] == oldest
    with sql_conn(a.settings.database_url or "") as conn:
        row = conn.execute("SELECT min(seq) FROM ops").fetchone()
        assert row is not None and row[0] == oldest + 1

    # A restore on one node is an ordinary write: the other converges on it.
    answer = await b.history.restore(NS, "pn:c", 45, ROOT, "undo-1", "http")
    assert answer["seq"] == 61
    await eventually(lambda: b_has(61) and a.engine.read(NS, "pn:c")["value"] == values[45])  # type: ignore[index]
    again = await a.history.restore(NS, "pn:c", 45, ROOT, "undo-1", "http")
    assert again["duplicate"] is True and again["seq"] == 61


async def test_a_revert_decodes_the_rows_written_before_their_writer_was_kept(
    start_node: StartNode,
) -> None:
    """Schema version 5 keeps each op's writer and tag beside its record, so a
    revert decodes only the rows it needs; rows written before it (tag 0)
    say nothing, and are decoded to know."""
    a = await start_node("a")
    await op(a, "rg:doc", {"op": "insert", "index": 0, "text": "hello"})
    await op(a, "rg:doc", {"op": "insert", "index": 5, "text": " AI", "origin": "agent:x"})
    await op(a, "rg:doc", {"op": "insert", "index": 0, "text": ">"})
    url = a.settings.database_url or ""
    with sql_conn(url) as conn:
        rows = conn.execute("SELECT writer, tag FROM ops ORDER BY seq").fetchall()
        assert [writer for writer, _ in rows] == [ROOT.client_id] * 3 and all(t for _, t in rows)
        conn.execute("UPDATE ops SET writer = 0, tag = 0")  # as version 4 left them
    answer = await a.reverts.revert(
        NS, "rg:doc", Writer(origin="agent:x"), None, None, ROOT, None, "http"
    )
    assert (answer["matched"], answer["applied"]) == (1, 1)
    read = a.engine.read(NS, "rg:doc")
    assert read is not None and read["text"] == ">hello"
    with sql_conn(url) as conn:
        row = conn.execute("SELECT tag FROM ops WHERE seq = 4").fetchone()
        assert row is not None and row[0] != 0
