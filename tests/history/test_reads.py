"""Filtered ``/history`` pages (``?client_id=``, ``?origin=``) on every store:
read through ``Store.history_window`` so that only the records that may be
the writer's are decoded, they answer exactly what reading every record
through ``Store.history`` answers (:func:`reference`, the reading as it was
first written): the same ops, oldest seq and cursor, at every page
boundary, at the scan bound, past the bottom of a trimmed history and with
ops not yet durable at the top."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, cast

import pytest

import syncd.history.reads as reads
from syncd.history.reads import Writer, read_page
from syncd.store.base import Record, Retained, Store
from tests.store.contract.backends import NS, Harness

CRDT = "pn:f"
WRITERS = (7, 8, 9)
ORIGINS = ("agent:a", "agent:b", None)
PAGE, SCAN = 16, 64
"""Small stand-ins for MAX_HISTORY_LIMIT and MAX_HISTORY_SCAN: a few hundred
ops then cross many page boundaries and the scan bound."""

QUERIES = [
    Writer(7),
    Writer(None, "agent:a"),
    Writer(8, "agent:b"),
    Writer(9),
    Writer(7, None),
    Writer(None, "nobody"),
]


async def reference(
    store: Store,
    ns: str,
    crdt_id: str,
    epoch: str,
    latest: int,
    before: int | None,
    limit: int,
    writer: Writer,
) -> tuple[list[Record], int, int | None]:
    """The filtered page as first written: every record decoded."""
    found: list[Record] = []
    scanned = 0
    cursor = before
    oldest = 0
    while True:
        want = min(reads.MAX_HISTORY_LIMIT, reads.MAX_HISTORY_SCAN - scanned)
        records, oldest = await store.history(ns, crdt_id, epoch, latest, cursor, want)
        for record in records:
            scanned += 1
            cursor = record["seq"]
            if writer.matches(record):
                found.append(record)
                if len(found) == limit:
                    return found, oldest, cursor if cursor > oldest + 1 else None
        if len(records) < want or (cursor is not None and cursor <= oldest + 1):
            return found, oldest, None
        if scanned >= reads.MAX_HISTORY_SCAN:
            return found, oldest, cursor


class Counting:
    """The store, counting the records a reader decodes (``history`` decodes
    every record it returns; a window's when they are read)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.decoded = 0
        self.windows = 0

    async def history(
        self, ns: str, crdt_id: str, epoch: str, latest: int, before: int | None, limit: int
    ) -> tuple[list[Record], int]:
        records, oldest = await self.store.history(ns, crdt_id, epoch, latest, before, limit)
        self.decoded += len(records)
        return records, oldest

    async def history_window(
        self, ns: str, crdt_id: str, epoch: str, latest: int, since: int | None, most: int
    ) -> tuple[Retained, int]:
        held, oldest = await self.store.history_window(ns, crdt_id, epoch, latest, since, most)
        self.windows += 1

        def load(i: int) -> Record:
            self.decoded += 1
            return held.record(i)

        return Retained(held.seqs, held.writers, held.tags, load), oldest


async def write(backend: Harness, count: int, seed: int) -> tuple[str, int]:
    """``count`` ops by the writers and origins, interleaved at random; the epoch and seq."""
    rng = random.Random(seed)
    for _ in range(count):
        body: dict[str, Any] = {"op": "increment"}
        origin = rng.choice(ORIGINS)
        if origin is not None:
            body["origin"] = origin
        await backend.commit(CRDT, body, client_id=rng.choice(WRITERS))
    entry = backend.engine.get(NS, CRDT)
    assert entry is not None
    return entry.epoch, entry.seq


async def same_answers(store: Store, epoch: str, latest: int, befores: Sequence[int | None]) -> int:
    """Every query, from every ``before``, following ``next`` to the end:
    the same answer as :func:`reference`. The pages compared."""
    pages = 0
    for writer in QUERIES:
        for limit in (1, 5, PAGE, 1000):
            for before in befores:
                while True:
                    got = await read_page(store, NS, CRDT, epoch, latest, before, limit, writer)
                    want = await reference(store, NS, CRDT, epoch, latest, before, limit, writer)
                    assert got == want, (writer, limit, before)
                    pages += 1
                    if got[2] is None:
                        break
                    before = got[2]
    return pages


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reads, "MAX_HISTORY_LIMIT", PAGE)
    monkeypatch.setattr(reads, "MAX_HISTORY_SCAN", SCAN)


@pytest.mark.usefixtures("small_pages")
async def test_filtered_pages_answer_as_reading_every_record(backend: Harness) -> None:
    epoch, latest = await write(backend, 300, seed=1)
    store = backend.store
    befores = [None, latest + 1, latest + 40, latest // 2, 3, 1, 0]
    assert await same_answers(store, epoch, latest, befores) > 100
    # Ops the engine has and the history not yet (a local store's run of ops
    # on its way to the disk): the top of the first page is missing.
    assert await same_answers(store, epoch, latest + 5, [None]) > 0
    # The history trimmed to what retention asks for (PostgreSQL trims at its
    # snapshots, already): a bottom that is not seq 1.
    if not backend.traits.shared:
        await backend.expire_history()
    _, oldest = await store.history(NS, CRDT, epoch, latest, None, 1)
    assert oldest > 0
    assert await same_answers(store, epoch, latest, [None, oldest + 2, oldest + 1]) > 0


@pytest.mark.usefixtures("small_pages")
async def test_a_filtered_page_decodes_only_the_writers_records(backend: Harness) -> None:
    epoch, latest = await write(backend, 120, seed=3)
    counting = Counting(backend.store)
    store = cast(Store, counting)  # read_page calls history and history_window only
    writer = Writer(8, "agent:b")
    found, _, _ = await read_page(store, NS, CRDT, epoch, latest, None, 1000, writer)
    looked_at, _ = await backend.store.history(NS, CRDT, epoch, latest, None, SCAN)
    theirs = [r for r in looked_at if writer.matches(r)]
    assert found == theirs and theirs
    assert counting.decoded == len(theirs) < len(looked_at) // 4
    # Unfiltered pages read every record, as before.
    counting.decoded = 0
    await read_page(store, NS, CRDT, epoch, latest, None, PAGE, None)
    assert counting.decoded == PAGE
