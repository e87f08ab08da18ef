"""The PostgreSQL store's namespace usage figures are bounded
(``USAGE_CACHE_MAX``): past the bound, the least recently used whose figures
are stale and idle, with nothing under way on them, are dropped, leaving the
usage board as if they had never been held; a namespace dropped is read
again when it is next used, and its quotas hold as before.

The nodes here keep 2 or 3 namespaces' figures and count them idle at once
(``usage_idle_s=0``), so what decides is staleness (``USAGE_REFRESH_S``),
waited for, and what is under way."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, Final

import pytest

from syncd.app import App
from syncd.auth import ROOT
from syncd.errors import ApiError
from syncd.store.base import Usage
from syncd.store.catalogue import UsageBoard
from syncd.store.postgres import USAGE_REFRESH_S, PostgresStore
from tests.store.pgnodes import StartNode, sql_conn, until_waiting_for_lock

pytestmark = pytest.mark.timeout(120)

STALE_S: Final = USAGE_REFRESH_S + 0.1
"""Waited for a namespace's figures to be stale (a lower bound: a loaded
machine only makes the wait longer, and the figures staler)."""

MAX_CRDTS: Final = 3

QUOTAS: Final[dict[str, Any]] = {"namespace_max_crdts": MAX_CRDTS}
"""A namespace quota: the service reads each namespace's usage before a write."""

# The test's own sessions hold table locks for seconds: the nodes must not
# end them as stalled (STALLED_PEER_S) nor give up the commit waiting.
PATIENT: Final[dict[str, Any]] = {"stalled_peer_s": 60.0, "commit_timeout_s": 60.0}


def store_of(app: App) -> PostgresStore:
    store = app.store
    assert isinstance(store, PostgresStore)
    return store


async def write(app: App, ns: str, crdt_id: str) -> None:
    await app.service.apply_ops(ns, crdt_id, {"op": "increment", "amount": 1}, ROOT, "http")


def held(store: PostgresStore) -> set[str]:
    """The namespaces whose figures the node holds (live CRDTs or not)."""
    return set(store._usage)


def check_board(store: PostgresStore) -> None:
    """The board is what it would be had only the held figures ever been held:
    its totals are their sums, its ranking theirs, and it keeps nothing of a
    namespace dropped."""
    # Before a ranking settles it: nothing of a dropped namespace waits there.
    assert store._usage_board.dirty <= held(store)
    usages = store.usages()
    namespaces, total = store.usage_total()
    assert namespaces == len(usages)
    assert total == Usage(
        sum(u.crdts for u in usages.values()),
        sum(u.bytes for u in usages.values()),
        sum(u.unmeasured for u in usages.values()),
    )
    fresh = UsageBoard()
    fresh.load((ns, (u.crdts, u.bytes, u.unmeasured)) for ns, u in usages.items())
    assert (fresh.namespaces, fresh.crdts, fresh.bytes, fresh.unmeasured) == (
        namespaces,
        total.crdts,
        total.bytes,
        total.unmeasured,
    )
    largest = store.largest_usages(len(usages) + 1)
    assert sorted(ns for ns, _ in largest) == sorted(usages)
    assert [u.bytes for _, u in largest] == sorted((u.bytes for u in usages.values()), reverse=True)
    assert all(usages[ns] == u for ns, u in largest)


async def test_past_the_bound_the_least_recently_used_stale_figures_go(
    start_node: StartNode,
) -> None:
    a = await start_node("a", usage_cache_max=2, usage_idle_s=0.0, settings=QUOTAS)
    store = store_of(a)
    for ns in ("n0", "n1", "n2"):
        await write(a, ns, "gc:x")
    # n0..n2 were read less than USAGE_REFRESH_S apart or not: some may have
    # gone already. Once all are stale, n1 is used again (read again) and a
    # new namespace comes: the bound keeps the two used last.
    await asyncio.sleep(STALE_S)
    started = time.monotonic()
    await write(a, "n1", "gc:x")
    await write(a, "n3", "gc:x")
    # (Unless the machine stalled past USAGE_REFRESH_S since n1's read: then
    # n1's figures were stale as well, and went too.)
    in_time = time.monotonic() - started < USAGE_REFRESH_S
    assert held(store) == {"n1", "n3"} if in_time else "n3" in held(store) <= {"n1", "n3"}
    check_board(store)
    # Figures read within USAGE_REFRESH_S are kept past the bound: n4 and n5
    # come at once, and n1 and n3 are not stale yet.
    await write(a, "n4", "gc:x")
    await write(a, "n5", "gc:x")
    if time.monotonic() - started < USAGE_REFRESH_S:
        assert held(store) == {"n1", "n3", "n4", "n5"}
    check_board(store)


async def test_figures_used_lately_are_kept_past_the_bound(start_node: StartNode) -> None:
    # Idle for an hour only: nothing may go, however many namespaces come.
    a = await start_node("a", usage_cache_max=2, usage_idle_s=3600.0, settings=QUOTAS)
    store = store_of(a)
    for i in range(5):
        await write(a, f"n{i}", "gc:x")
    await asyncio.sleep(STALE_S)
    await write(a, "n5", "gc:x")
    assert held(store) == {f"n{i}" for i in range(6)}
    check_board(store)


@pytest.mark.parametrize(
    ("crdt_id", "row_lock"),
    [
        # An op on p's CRDT (its commit under way), and the creation of one
        # (counted in p's figures, not committed yet).
        ("gc:x", "SELECT 1 FROM crdts WHERE ns = 'p' AND id = 'gc:x' FOR UPDATE"),
        (
            "gc:y",
            "INSERT INTO crdts (ns, id, type, epoch, seq, deleted)"
            " VALUES ('p', 'gc:y', '', '', 0, true)",
        ),
    ],
    ids=["op", "creation"],
)
async def test_a_commit_under_way_keeps_its_namespaces_figures(
    start_node: StartNode, pg_url: str, crdt_id: str, row_lock: str
) -> None:
    # The write to p waits for its CRDT's row lock, which a session of the
    # test holds, past USAGE_REFRESH_S: p's figures are stale and idle, yet
    # kept when q's read takes the node past its bound of 1; once the commit
    # is done both go.
    a = await start_node("a", usage_cache_max=1, usage_idle_s=0.0, settings=QUOTAS, **PATIENT)
    store = store_of(a)
    await write(a, "p", "gc:x")
    await asyncio.sleep(STALE_S)
    with sql_conn(pg_url) as locker, sql_conn(pg_url) as watcher:
        locker.execute("BEGIN")
        locker.execute(row_lock)
        writing = asyncio.ensure_future(write(a, "p", crdt_id))
        await until_waiting_for_lock(watcher, "%INSERT INTO crdts%", writing, "its row")
        await asyncio.sleep(STALE_S)
        # What a write to q asks first (its commit would wait behind p's).
        await store.usage("q")
        assert held(store) == {"p", "q"}
        check_board(store)
        locker.execute("ROLLBACK")
        await asyncio.wait_for(writing, 30)
    assert store.usage_now("p").crdts == (1 if crdt_id == "gc:x" else 2)
    await asyncio.sleep(STALE_S)
    await write(a, "r", "gc:x")
    assert held(store) == {"r"}
    check_board(store)


async def test_the_board_stays_exact_through_drops(start_node: StartNode) -> None:
    # Seeded writes, creations and deletes over eight namespaces, with a
    # bound of 3: each round's stale figures go as the next round's come.
    a = await start_node(
        "a", usage_cache_max=3, usage_idle_s=0.0, settings={"namespace_max_crdts": 50}
    )
    store = store_of(a)
    rng = random.Random(20261128)
    live: dict[str, set[str]] = {}
    seen: set[str] = set()
    dropped = 0
    for _ in range(3):
        for _ in range(24):
            ns = f"n{rng.randrange(8)}"
            crdt_id = f"gc:{rng.randrange(4)}"
            before = held(store)
            if crdt_id in live.get(ns, ()) and rng.random() < 0.3:
                assert await a.service.delete(ns, crdt_id)
                live[ns].discard(crdt_id)
            else:
                await write(a, ns, crdt_id)
                live.setdefault(ns, set()).add(crdt_id)
            dropped += len(before - held(store))
            seen.add(ns)
            check_board(store)
        await asyncio.sleep(STALE_S)
    assert dropped > 0
    await write(a, "n8", "gc:0")
    live["n8"] = {"gc:0"}
    seen.add("n8")
    assert len(held(store)) == 3  # every stale one but the two used last went
    check_board(store)
    # The figures held are the database's (read again where a delete left
    # them to be), and a namespace dropped is read again when used.
    for ns in sorted(seen):
        assert (await store.usage(ns)).crdts == len(live.get(ns, ())), ns
    check_board(store)


async def test_a_dropped_namespaces_quota_still_holds(start_node: StartNode) -> None:
    a = await start_node("a", usage_cache_max=1, usage_idle_s=0.0, settings=QUOTAS)
    store = store_of(a)
    for i in range(MAX_CRDTS):
        await write(a, "full", f"gc:{i}")
    await asyncio.sleep(STALE_S)
    await write(a, "other", "gc:x")
    assert held(store) == {"other"}  # full's figures went
    assert store.usage_now("full") == Usage()
    with pytest.raises(ApiError) as refused:
        await write(a, "full", f"gc:{MAX_CRDTS}")
    assert (refused.value.status, refused.value.code) == (403, "quota_exceeded")
    assert store.usage_now("full").crdts == MAX_CRDTS  # read again
    await write(a, "full", "gc:0")  # its CRDTs still take ops
