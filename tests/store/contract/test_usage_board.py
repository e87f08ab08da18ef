"""Every store's usage summary (``usage_total``, ``largest_usages``: what a
metrics scrape reads instead of walking every namespace) agrees with a walk
of ``usages()`` through seeded random writes that grow and shrink CRDTs,
deletes, evictions from the engine (the CRDT loaded back, and measured, on
its next write) and restarts (the embedded store loads the saved table's
usages; its key directory here keeps few lives in memory and writes a table
every few changes, so rows are read back and written often).

The board names :data:`KEEP` namespaces here (of :data:`NAMESPACES`), so
that its candidates are trimmed, its floor rises, and the largest shrink
below it (deletes), as they do at a thousand of a million namespaces."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Final

import pytest

from syncd.store.base import Store, Usage
from syncd.store.catalogue import UsageBoard
from tests.store.contract.backends import FileHarness, Harness

KEEP: Final = 2
NAMESPACES: Final = 9
IDS_PER_NAMESPACE: Final = 4
STEPS: Final = 160


@pytest.fixture(autouse=True)
def small_board(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every board made during the test names KEEP namespaces (the stores
    make theirs as they open, with the default)."""
    monkeypatch.setattr(UsageBoard.__init__, "__defaults__", (KEEP,))


class SmallKeyDirHarness(FileHarness):
    """FileHarness whose key directory holds 3 lives and writes a table
    every 3 changed ones."""

    store_options = {"index_flush_crdts": 3, "index_cached_crdts": 3}


def walked(store: Store) -> tuple[tuple[int, Usage], list[int]]:
    """What the summary must say: ``usages()`` summed, and the bytes of the
    KEEP largest (names differ at ties)."""
    usages = store.usages().values()
    total = Usage(
        sum(u.crdts for u in usages),
        sum(u.bytes for u in usages),
        sum(u.unmeasured for u in usages),
    )
    return (len(usages), total), sorted((u.bytes for u in usages), reverse=True)[:KEEP]


def check(store: Store, step: int, scrape: bool) -> None:
    total, largest = walked(store)
    assert store.usage_total() == total, step
    if scrape:
        named = store.largest_usages(KEEP + 3)
        assert [u.bytes for _, u in named] == largest, step
        usages = store.usages()
        assert all(usages[ns] == u for ns, u in named), step


async def delete(harness: Harness, ns: str, crdt_id: str) -> None:
    """``Harness.delete`` in any namespace."""
    await harness.ensure(crdt_id, ns)
    record = harness.engine.delete(ns, crdt_id)
    assert record is not None
    await harness.store.append([record])


async def run_random_steps(harness: Harness, seed: int) -> None:
    rng = random.Random(seed)
    live: set[tuple[str, str]] = set()
    for step in range(STEPS):
        roll = rng.random()
        if roll < 0.55 or not live:
            ns = f"ns{rng.randrange(NAMESPACES)}"
            crdt_id = f"lw:c{rng.randrange(IDS_PER_NAMESPACE)}"
            value = "v" * rng.choice((1, 10, 100, 1000, 5000))
            await harness.commit(crdt_id, {"op": "set", "value": value}, ns=ns)
            live.add((ns, crdt_id))
        elif roll < 0.7:
            ns, crdt_id = rng.choice(sorted(live))
            live.discard((ns, crdt_id))
            await delete(harness, ns, crdt_id)
        elif roll < 0.82:
            ns, crdt_id = rng.choice(sorted(live))
            harness.engine.drop(ns, crdt_id)  # evicted: loaded and measured again when used
        elif roll < 0.85:
            await harness.restart()
        else:
            # A quota check: the shared store reads (and caches) the figures.
            await harness.store.usage(f"ns{rng.randrange(NAMESPACES)}")
        check(harness.store, step, scrape=rng.random() < 0.3)
    for i in range(NAMESPACES):  # PostgreSQL: every namespace's figures cached
        await harness.store.usage(f"ns{i}")
    check(harness.store, STEPS, scrape=True)


@pytest.mark.parametrize("seed", range(2))
async def test_the_summary_matches_a_walk_through_random_changes(
    backend: Harness, seed: int
) -> None:
    await run_random_steps(backend, seed)
    assert backend.store.usage_total()[0] > KEEP  # the ranking had a choice to make


@pytest.mark.parametrize("seed", range(3))
async def test_the_embedded_summary_holds_with_a_small_key_directory(
    tmp_path: Path, seed: int
) -> None:
    harness = SmallKeyDirHarness(tmp_path / "data")
    harness.recovered = await harness.start()
    try:
        await run_random_steps(harness, seed)
    finally:
        await harness.finish()
