"""The catalogue's usage board: running totals and the largest namespaces by
bytes, kept as usages change, agree with a walk over every namespace through
adds, size changes, forgotten sizes and deletes, at and past the number of
namespaces it names."""

from __future__ import annotations

import random

import pytest

from syncd.store.catalogue import LARGEST_KEPT, UNMEASURED, Catalogue, Usage, UsageBoard


def walked_total(catalogue: Catalogue) -> tuple[int, Usage]:
    """What ``usage_total`` must say: ``usages()`` summed."""
    usages = catalogue.usages().values()
    return len(usages), Usage(
        sum(u.crdts for u in usages),
        sum(u.bytes for u in usages),
        sum(u.unmeasured for u in usages),
    )


def walked_largest_bytes(catalogue: Catalogue, k: int) -> list[int]:
    """The bytes of the ``k`` largest namespaces (names differ at ties)."""
    return sorted((u.bytes for u in catalogue.usages().values()), reverse=True)[:k]


@pytest.mark.parametrize("seed", range(6))
def test_totals_and_largest_match_a_walk_through_random_changes(seed: int) -> None:
    """Seeded random adds, re-sizes, unmeasures and deletes over 60
    namespaces, a board naming 5: after every step the totals, and at random
    "scrapes" (the namespaces changed since the last one ranked at once) the
    five largest, are what walking every namespace finds, though the largest shrink
    and are deleted (the board then ranks every namespace again)."""
    rng = random.Random(seed)
    catalogue = Catalogue()
    catalogue.board = UsageBoard(keep=5)
    live: list[tuple[str, str]] = []
    for step in range(2000):
        roll = rng.random()
        if roll < 0.35 or not live:
            ns, crdt_id = f"ns{rng.randrange(60)}", f"gc:c{step}"
            size = UNMEASURED if rng.random() < 0.2 else rng.randrange(1, 10_000)
            catalogue.add(ns, crdt_id, "gcounter", size)
            live.append((ns, crdt_id))
        elif roll < 0.7:
            ns, crdt_id = rng.choice(live)
            catalogue.note_size(ns, crdt_id, rng.randrange(1, 10_000))
        elif roll < 0.8:
            catalogue.unmeasure(*rng.choice(live))
        else:
            ns, crdt_id = live.pop(rng.randrange(len(live)))
            catalogue.remove(ns, crdt_id)
        assert catalogue.usage_total() == walked_total(catalogue), step
        if rng.random() < 0.9:
            continue  # a scrape every tenth step or so: many changes settle at once
        largest = catalogue.largest_usages(5)
        assert [u.bytes for _, u in largest] == walked_largest_bytes(catalogue, 5), step
        assert all(catalogue.usage(ns) == u for ns, u in largest)


def test_sizes_noted_before_the_first_record_count_once_it_is_indexed() -> None:
    """A size noted for an id not yet in the catalogue is in the namespace's
    bytes (as ``usage`` says), but the namespace counts only from its first
    live CRDT on, as ``usages()`` lists it."""
    catalogue = Catalogue()
    catalogue.note_size("a", "gc:x", 40)
    assert catalogue.usage_total() == (0, Usage()) == walked_total(catalogue)
    assert catalogue.largest_usages(10) == []
    catalogue.add("a", "gc:x", "gcounter")
    assert catalogue.usage_total() == (1, Usage(1, 40, 0)) == walked_total(catalogue)
    catalogue.remove("a", "gc:x")
    assert catalogue.usage_total() == (0, Usage()) == walked_total(catalogue)
    assert catalogue.largest_usages(10) == []


def test_at_most_largest_kept_namespaces_are_named() -> None:
    """LARGEST_KEPT + 1 namespaces, sizes 1..LARGEST_KEPT + 1: the board
    names the LARGEST_KEPT largest however many are asked for, and never the
    smallest; with exactly LARGEST_KEPT, every one."""
    catalogue = Catalogue()
    for i in range(1, LARGEST_KEPT + 1):
        catalogue.add(f"ns{i}", "gc:x", "gcounter", i)
    assert {ns for ns, _ in catalogue.largest_usages(LARGEST_KEPT + 10)} == {
        f"ns{i}" for i in range(1, LARGEST_KEPT + 1)
    }
    catalogue.add("ns0", "gc:x", "gcounter", 0)
    named = catalogue.largest_usages(LARGEST_KEPT + 10)
    assert len(named) == LARGEST_KEPT
    assert "ns0" not in {ns for ns, _ in named}
    assert named[0] == (f"ns{LARGEST_KEPT}", Usage(1, LARGEST_KEPT, 0))


def test_a_board_must_name_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        UsageBoard(keep=0)


def test_a_board_loaded_from_saved_usages_matches_a_walk() -> None:
    """``load`` (a store opening from a saved table of usages) gives the
    totals and ranking of the namespaces that hold a CRDT, and forgets what
    it held before (totals, candidates and dirty namespaces)."""
    rng = random.Random(7)
    saved = [(f"ns{i}", (rng.randrange(0, 4), rng.randrange(0, 1000), 0)) for i in range(500)]
    ranked = dict(saved)

    def bytes_of(ns: str) -> int | None:
        return ranked[ns][1] if ns in ranked and ranked[ns][0] > 0 else None

    def every() -> list[tuple[str, int]]:
        return [(ns, c[1]) for ns, c in saved if c[0] > 0]

    loaded = UsageBoard(keep=20)
    loaded.load([("gone", (3, 10**9, 1))])
    loaded.dirty.add("gone")
    loaded.load(saved)
    counted = [c for _, c in saved if c[0] > 0]
    for board in (loaded,):
        assert (board.namespaces, board.crdts, board.bytes) == (
            len(counted),
            sum(c[0] for c in counted),
            sum(c[1] for c in counted),
        )
        assert board.unmeasured == 0
        assert not board.stale
        assert [ranked[ns][1] for ns in board.largest(20, bytes_of, every)] == sorted(
            (c[1] for c in counted), reverse=True
        )[:20]
