"""History reads on PostgreSQL are one snapshot (``PostgresStore.history``,
``history_window``, ``history_base``): each reads its statements in one
repeatable-read, read-only transaction, so a write or a trim of the retained
ops committed between two of them cannot tear the answer.

Each answer is checked against what a deterministic replay says it must be:
the CRDT is a pn counter that every op increments by 1, so the state after
op ``s`` is ``s``, and the retained rows of one snapshot are the ops after
``oldest`` up to the newest, every one of them."""

from __future__ import annotations

import asyncio
from typing import Any, Final

import pytest

from syncd.app import App
from syncd.crdt.base import Base
from syncd.crdt.types import crdt_class
from syncd.errors import ApiError
from syncd.store.history_index import Retention
from syncd.store.postgres import PostgresStore
from tests.store.pgnodes import NS, StartNode, op, sql_conn, until_waiting_for_lock

pytestmark = pytest.mark.timeout(120)

CRDT: Final = "pn:h"

TRIMMING: Final[dict[str, Any]] = {
    # A checkpoint every 2 ops, and each one trims the ops and checkpoints
    # older than 2 ops behind it: the retained rows move on every other write.
    "snapshot_every": 2,
    "ops_retained": 0,
    "settings": {"history_retention": Retention.parse("2ops")},
}

WRITES: Final = 400
"""Ops the writer commits while the readers read (each one a transaction,
every other one a trim)."""

READERS: Final = 6


def store_of(app: App) -> PostgresStore:
    store = app.store
    assert isinstance(store, PostgresStore)
    return store


def value_at(base: Base) -> int:
    value = base.crdt().view(0)["value"]
    assert isinstance(value, int)
    return value


async def test_history_reads_racing_writes_and_trims_are_never_torn(
    start_node: StartNode,
) -> None:
    a = await start_node("a", **TRIMMING)
    store = store_of(a)
    first = await op(a, CRDT, {"op": "increment", "amount": 1})
    entry = a.engine.get(NS, CRDT)
    assert entry is not None
    epoch = entry.epoch
    committed = [first.seq]
    done = False
    checked = {"history": 0, "window": 0, "base": 0, "expired": 0}

    async def write() -> None:
        nonlocal done
        try:
            for _ in range(WRITES):
                result = await op(a, CRDT, {"op": "increment", "amount": 1})
                committed.append(result.seq)
        finally:
            done = True

    async def read(reader: int) -> None:
        turn = 0
        while not done:
            latest = committed[-1]  # committed: its rows are all written
            kind = (reader + turn) % 3
            turn += 1
            if kind == 0:
                records, oldest = await store.history(NS, CRDT, epoch, latest, None, 10_000)
                # Every retained op up to latest, newest first; none at or
                # before oldest (those a trim took are no longer retained).
                assert [r["seq"] for r in records] == list(range(latest, oldest, -1)), (
                    latest,
                    oldest,
                )
                checked["history"] += 1
            elif kind == 1:
                held, oldest = await store.history_window(NS, CRDT, epoch, latest, None, 10_000)
                assert held.seqs == list(range(oldest + 1, latest + 1)), (latest, oldest)
                checked["window"] += 1
            else:
                try:
                    state, records = await store.history_base(NS, CRDT, epoch, latest, latest)
                except ApiError as error:
                    # Expired only when the snapshot retained nothing at latest.
                    assert error.code == "history_expired"
                    assert error.extra is not None and error.extra["oldest"] > latest, (
                        latest,
                        error.extra,
                    )
                    checked["expired"] += 1
                    continue
                base = Base(
                    crdt_class(entry.type),
                    state["state"] if state is not None else None,
                    [record["op"] for record in records],
                )
                assert value_at(base) == latest
                checked["base"] += 1
            await asyncio.sleep(0)

    await asyncio.gather(write(), *(read(i) for i in range(READERS)))
    assert committed[-1] == WRITES + 1
    # Each kind of read ran many times against a history that moved under it.
    assert min(checked["history"], checked["window"], checked["base"]) >= 50, checked


async def test_a_trim_between_a_history_reads_statements_is_not_seen(
    start_node: StartNode, pg_url: str
) -> None:
    # The same race, placed: a session of the test holds the checkpoints
    # table, so the page's read of the ops runs and its read of what is
    # oldest (which reads checkpoints) waits; meanwhile that session trims
    # the ops up to checkpoint 10 (as a snapshot write under a shorter
    # retention does) and commits. Read outside one snapshot, the page listed
    # ops 12..1 with oldest 10; in one, it is the page of before the trim.
    a = await start_node(
        "a", snapshot_every=5, settings={"history_retention": Retention.parse("1000ops")}
    )
    store = store_of(a)
    for _ in range(12):
        await op(a, CRDT, {"op": "increment", "amount": 1})
    entry = a.engine.get(NS, CRDT)
    assert entry is not None and entry.seq == 12
    key = (NS, CRDT, entry.epoch)
    with sql_conn(pg_url) as trimmer, sql_conn(pg_url) as watcher:
        trimmer.execute("BEGIN")
        trimmer.execute("LOCK TABLE checkpoints IN ACCESS EXCLUSIVE MODE")
        page = asyncio.ensure_future(store.history(NS, CRDT, entry.epoch, 12, None, 100))
        # The page's second statement waits for the table lock.
        await until_waiting_for_lock(
            watcher, "%FROM checkpoints%", page, "the checkpoints table (the page's second read)"
        )
        trimmer.execute(
            "DELETE FROM ops WHERE ns = %s AND id = %s AND epoch = %s AND seq <= 10", key
        )
        trimmer.execute(
            "DELETE FROM checkpoints WHERE ns = %s AND id = %s AND epoch = %s AND seq < 10", key
        )
        trimmer.execute("COMMIT")
        records, oldest = await asyncio.wait_for(page, 30)
    assert ([r["seq"] for r in records], oldest) == (list(range(12, 0, -1)), 0)
    # And the next read is of after the trim, whole as well.
    records, oldest = await store.history(NS, CRDT, entry.epoch, 12, None, 100)
    assert ([r["seq"] for r in records], oldest) == ([12, 11], 10)
