"""``KeyDir.listing`` (GET /v1/namespaces/{ns}/crdts, a page at a time after a
cursor) finds the overlay's next ids without sorting the whole overlay: it
sorted up to ~49,000 ids (the lives read or changed since the last table) on
every page, ~19 ms per page at 100,000 CRDTs, so paging a namespace cost time
quadratic in its CRDTs, each page holding the event loop that long. And the
pages stay exact while CRDTs come and go between them."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from syncd.store.embedded.hint import open_table
from syncd.store.embedded.keydir import IDS_BLOCK, KeyDir, SortedIds
from syncd.store.embedded.store import FileStore
from tests.http.support import ADMIN_HEADERS
from tests.store.conftest import MakeStore
from tests.store.embedded.test_hint import NS, Writer
from tests.store.embedded.test_keydir import _write_table
from tests.store.support import deleted

LIST = "/v1/namespaces/app/crdts"

OVERLAY = 30_000
"""Ids in memory: enough that sorting them costs milliseconds, few enough to
index in a fraction of a second."""


def _overlay(count: int) -> tuple[KeyDir, list[str]]:
    index = KeyDir(flush_lives=10 * count)  # no table: every life in the overlay
    rng = random.Random(5)
    ids = [f"doc:{rng.randrange(10**9):09d}:{i}" for i in range(count)]
    for pos, crdt_id in enumerate(ids):
        index.add_op(NS, crdt_id, "e", 1, 1000, pos, 10)
        index.note_type(NS, crdt_id, "gcounter")
    return index, ids


def test_a_page_costs_its_rows_not_a_sort_of_the_overlay() -> None:
    """200 pages from cursors all over the namespace take less CPU than a few
    sorts of the overlay's ids (each page sorted them all: 200 sorts). CPU
    time of this process, against a sort timed alongside: the ratio holds on
    a loaded machine."""
    index, ids = _overlay(OVERLAY)
    rng = random.Random(7)
    cursors = [rng.choice(ids) for _ in range(200)]
    sorts = []
    for _ in range(3):
        started = time.process_time()
        sorted(ids)
        sorts.append(time.process_time() - started)
    one_sort = statistics.median(sorts)
    started = time.process_time()
    for after in cursors:
        index.listing(NS, "doc:", after, 10)
    paging = time.process_time() - started
    assert paging < 20 * one_sort, (
        f"200 pages took {paging * 1e3:.1f} ms, one sort of the overlay {one_sort * 1e3:.1f} ms"
    )
    reference = sorted(ids)
    for after in cursors[:20]:
        at = reference.index(after) + 1
        assert [c for c, _, _ in index.listing(NS, "doc:", after, 10)] == reference[at : at + 10]


async def test_pages_are_exact_while_crdts_come_and_go_between_them(
    make_store: MakeStore, tmp_path: Path
) -> None:
    """On the real store (a table written every 16 changed CRDTs, 8 clean
    lives cached, so ids lie in the table, the overlay or both): between
    pages CRDTs are created, deleted, created again and read back, before and
    after the cursor. Every page is exactly the first ``limit`` live ids after
    its cursor, in order, with their types and latest seqs; ids of another
    prefix are never listed."""
    rng = random.Random(11)
    store, _ = await make_store(tmp_path / "data", index_flush_crdts=16, index_cached_crdts=8)
    writer = Writer(store)
    live: dict[str, int] = {}  # id -> latest seq

    async def create(crdt_id: str) -> None:
        if crdt_id not in live:
            writer.engine = type(writer.engine)()  # a new life after a delete
        live[crdt_id] = await writer.op(crdt_id, {"op": "increment"})

    async def delete(crdt_id: str) -> None:
        await store.append([deleted(crdt_id, NS)])
        writer.engine = type(writer.engine)()
        live.pop(crdt_id, None)

    for i in range(0, 400, 2):
        await create(f"gc:{i:03d}")
    for i in range(0, 400, 6):
        await create(f"gc:{i:03d}")  # a second op: seq 2
    await writer.op("pn:other", {"op": "increment"})  # another prefix, never listed
    await store._history.wait_index_flush()

    for limit in (7, 1, 25):
        after: str | None = None
        seen: list[str] = []
        while True:
            page = await store.list_ids(NS, "gc:", after, limit)
            expected = sorted(c for c in live if after is None or c > after)[:limit]
            assert [c for c, _, _ in page] == expected, (limit, after)
            assert page == [(c, "gcounter", live[c]) for c in expected], (limit, after)
            if not page:
                break
            seen += [c for c, _, _ in page]
            after = page[-1][0]
            for _ in range(rng.randrange(4)):  # changes on both sides of the cursor
                crdt_id = f"gc:{rng.randrange(400):03d}"
                if crdt_id in live and rng.random() < 0.5:
                    await delete(crdt_id)
                elif rng.random() < 0.3 and crdt_id in live:
                    await writer.value(crdt_id)  # read back into the overlay
                else:
                    await create(crdt_id)
        assert seen == sorted(set(seen)), "an id came twice or out of order"
    await store.close()


def test_sorted_ids_match_a_sorted_set_through_splits_and_joins() -> None:
    """Thousands of ids added and discarded at random (blocks split as they
    fill and join as they empty): after every step the ids from any start,
    past it or from it, are those of a sorted reference."""
    rng = random.Random(3)
    ids = SortedIds()
    reference: set[str] = set()
    universe = [f"gc:{i:05d}" for i in range(6 * IDS_BLOCK)]
    peak = 0
    for step in range(12 * len(universe)):
        crdt_id = rng.choice(universe)
        grow = step < 6 * len(universe)  # fill up, then empty out
        if crdt_id in reference and (not grow or rng.random() < 0.3):
            ids.discard(crdt_id)
            reference.discard(crdt_id)
        elif crdt_id not in reference and grow:
            ids.add(crdt_id)
            reference.add(crdt_id)
        ids.discard(crdt_id + "~")  # not held: nothing happens
        peak = max(peak, len(reference))
        if step % 997 == 0:
            ordered = sorted(reference)
            assert list(ids.after("", True)) == ordered
            start = rng.choice(universe)
            assert list(ids.after(start, False)) == [c for c in ordered if c > start]
            assert list(ids.after(start, True)) == [c for c in ordered if c >= start]
    assert peak > 4 * IDS_BLOCK  # blocks split
    assert len(ids) == len(reference) < IDS_BLOCK // 4
    assert len(ids._blocks) == 1  # the emptied blocks joined
    assert list(ids.after("", True)) == sorted(reference)


def test_a_namespace_whose_lives_all_left_memory_keeps_no_sorted_ids(tmp_path: Path) -> None:
    """The overlay's sorted ids are kept per namespace: one whose CRDTs were
    all deleted, or whose clean lives were all let go, drops its (empty)
    entry, so a node that serves many namespaces in turn does not keep one
    for each it ever served."""
    table_keys = sorted((f"ns{i:03d}", "gc:a") for i in range(300))
    _write_table(tmp_path, table_keys)
    table = open_table(str(tmp_path), [])
    assert table is not None
    index = KeyDir(cached_lives=4)
    index.attach(table)
    try:
        for ns, crdt_id in table_keys:
            assert index.get(ns, crdt_id) is not None  # read back, then let go
        for i in range(300):
            index.add_op(f"new{i:03d}", "gc:b", "e", 1, 1000, i, 10)
            index.deleted(f"new{i:03d}", "gc:b")
        assert len(index) == 4
        assert len(index._by_ns) == 4, "an emptied namespace kept its sorted ids"
        assert [c for c, _, _ in index.listing("ns007", "", None, 10)] == ["gc:a"]
    finally:
        index.close()


async def test_http_pages_are_exact_over_a_table_and_changes_since(
    make_server: Callable[..., Any], tmp_path: Path
) -> None:
    """Over the real server: CRDTs written before a restart lie in the
    table (a clean stop writes it), those created since in the overlay; a
    client paging GET /v1/namespaces/{ns}/crdts while CRDTs are created and
    deleted on both sides of its cursor gets, on every page, exactly the
    first ids after the cursor, and ``next`` says whether more follow."""
    rng = random.Random(13)
    data = tmp_path / "listing-data"
    live: set[str] = set()
    first = await make_server(data_dir=data)
    async with httpx.AsyncClient(base_url=first.url, headers=ADMIN_HEADERS) as http:
        for i in range(0, 90, 3):
            r = await http.post(f"{LIST}/gc:{i:02d}/ops", json={"op": "increment"})
            assert r.status_code == 200, r.text
            live.add(f"gc:{i:02d}")
    await first.server.shutdown()
    server = await make_server(data_dir=data)
    store = server.app.store
    assert isinstance(store, FileStore)
    index = store._history.index
    assert index.table is not None and len(index) == 0  # every id in the table
    async with httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS) as http:
        cursor: str | None = None
        while True:
            query = "limit=4" + ("" if cursor is None else f"&cursor={cursor}")
            r = await http.get(f"{LIST}?{query}")
            assert r.status_code == 200, r.text
            after = sorted(c for c in live if cursor is None or c > cursor)
            assert [item["id"] for item in r.json()["crdts"]] == after[:4], cursor
            assert r.json()["next"] == (after[3] if len(after) > 4 else None), cursor
            cursor = r.json()["next"]
            if cursor is None:
                break
            for _ in range(3):
                crdt_id = f"gc:{rng.randrange(90):02d}"
                if crdt_id in live:
                    r = await http.delete(f"{LIST}/{crdt_id}")
                    assert r.status_code == 204, r.text
                    live.discard(crdt_id)
                else:
                    r = await http.post(f"{LIST}/{crdt_id}/ops", json={"op": "increment"})
                    assert r.status_code == 200, r.text
                    live.add(crdt_id)
