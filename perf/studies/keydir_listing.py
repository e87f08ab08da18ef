"""What a listing page and an overlay insert cost in the embedded store's key
directory (embedded/keydir.py), at 100,000 CRDTs in one namespace.

A real :class:`KeyDir` over a real table of ``--crdts`` rows, with a full
overlay as a busy node has it: ``CACHED_LIVES`` rows read back (clean) and
``FLUSH_LIVES`` changed (dirty), spread over the id space. Then:

- a listing page: paging the whole namespace with ``--limit`` (the
  GET /v1/namespaces/{ns}/crdts cursor), ms per page;
- an overlay insert: a row read back into the overlay (the cost of a
  ``_find`` that misses memory, block read included), and a new CRDT's
  first op, us each;
- a page right after an insert (the overlay changed since the last page);
- the sorted ids alone: an add and a discard at the overlay's size, us.

Usage: python -m perf.studies.keydir_listing [--crdts 100000] [--limit 100]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time

from syncd.store.embedded.hint import Header, TableWriter, open_table
from syncd.store.embedded.keydir import (
    CACHED_LIVES,
    FLUSH_LIVES,
    KeyDir,
    SortedIds,
    encode_row,
)
from syncd.store.history_index import Life

NS = "bench"


def _row(seq: int) -> Life:
    life = Life("e")
    life.from_start = True
    life.type_name, life.size = "gcounter", 40
    life.seqs.append(seq)
    life.ts.append(1000)
    life.pos.append(100)
    life.writers.append(0)
    life.tags.append(0)
    return life


def build(directory: str, crdts: int, rng: random.Random) -> tuple[KeyDir, list[str]]:
    """A key directory over a table of ``crdts`` rows, its overlay full."""
    ids = [f"doc:{i:07d}" for i in range(crdts)]
    writer = TableWriter(directory)
    for crdt_id in ids:
        life = _row(1)
        writer.add((NS, crdt_id), encode_row(life), life.type_name, life.size)
    writer.finish(Header(end=0, last_lsn=1, segments={}))
    table = open_table(directory, [])
    assert table is not None
    index = KeyDir()
    index.attach(table)
    chosen = rng.sample(ids, min(crdts, CACHED_LIVES + FLUSH_LIVES - 1))
    for crdt_id in chosen[:CACHED_LIVES]:
        index.get(NS, crdt_id)  # read back: clean
    for n, crdt_id in enumerate(chosen[CACHED_LIVES:]):
        index.add_op(NS, crdt_id, "e", 2, 2000, 200 + n, 10)  # changed: dirty
    return index, ids


def page_through(index: KeyDir, limit: int) -> tuple[int, float]:
    """(pages, seconds) to list the whole namespace."""
    after: str | None = None
    pages = 0
    started = time.process_time()
    while True:
        page = index.listing(NS, "", after, limit)
        pages += 1
        if len(page) < limit:
            break
        after = page[-1][0]
    return pages, time.process_time() - started


def insert_costs(index: KeyDir, ids: list[str], rng: random.Random, n: int) -> tuple[float, float]:
    """(us per row read back into the overlay, us per new CRDT's first op)."""
    absent = [i for i in rng.sample(ids, 4 * n) if (NS, i) not in index._lives][:n]
    started = time.process_time()
    for crdt_id in absent:
        index.get(NS, crdt_id)
    read_back = (time.process_time() - started) / len(absent)
    fresh = [f"new:{rng.randrange(10**9):09d}:{i}" for i in range(n)]
    started = time.process_time()
    for k, crdt_id in enumerate(fresh):
        index.add_op(NS, crdt_id, "e", 1, 3000, 900_000 + k, 10)
    created = (time.process_time() - started) / n
    return read_back * 1e6, created * 1e6


def page_after_change(index: KeyDir, ids: list[str], rng: random.Random, limit: int) -> float:
    """ms of a page in the middle of the namespace right after a new CRDT."""
    times = []
    for k in range(50):
        index.add_op(NS, f"mid:{k:05d}", "e", 1, 4000, 950_000 + k, 10)
        after = rng.choice(ids)
        started = time.process_time()
        index.listing(NS, "", after, limit)
        times.append(time.process_time() - started)
    return statistics.median(times) * 1e3


def sorted_ids_cost(ids: list[str], size: int, rng: random.Random, n: int) -> float:
    """us per add plus discard of an id in a SortedIds of ``size`` ids."""
    held = SortedIds()
    for crdt_id in rng.sample(ids, size):
        held.add(crdt_id)
    fresh = [f"{rng.choice(ids)}~{i}" for i in range(n)]
    started = time.process_time()
    for crdt_id in fresh:
        held.add(crdt_id)
        held.discard(crdt_id)
    return (time.process_time() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--crdts", type=int, default=100_000)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as directory:
        index, ids = build(directory, args.crdts, rng)
        try:
            print(f"crdts {args.crdts}, overlay {len(index)} lives, limit {args.limit}")
            pages, seconds = page_through(index, args.limit)
            print(f"paging the namespace: {pages} pages, {seconds * 1e3 / pages:.3f} ms/page")
            read_back, created = insert_costs(index, ids, rng, 2000)
            print(f"row read back into the overlay: {read_back:.1f} us")
            print(f"new CRDT's first op (overlay insert): {created:.1f} us")
            changed = page_after_change(index, ids, rng, args.limit)
            print(f"page right after a new CRDT: {changed:.3f} ms (median)")
            size = CACHED_LIVES + FLUSH_LIVES
            both = sorted_ids_cost(ids, min(size, len(ids)), rng, 20_000)
            print(f"SortedIds add + discard at {size} ids: {both:.2f} us")
        finally:
            index.close()


if __name__ == "__main__":
    main()
