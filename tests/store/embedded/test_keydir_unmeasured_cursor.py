"""``KeyDir.unmeasured`` resumes after the last key it returned and wraps
around: successive calls hand out successive batches, each unmeasured CRDT
once per round, the overlay's (lives changed since the table) as well as the
table's. Without a cursor every call began again at the first key, so the
background measure of a store it cannot read (each call asks past the keys
it passed) cost time quadratic in the CRDTs: ~2.9 s of CPU at 50,000."""

from __future__ import annotations

from pathlib import Path

from syncd.store.embedded.hint import open_table
from syncd.store.embedded.keydir import KeyDir
from tests.store.embedded.test_keydir import _write_table

Key = tuple[str, str]


def _keydir(tmp_path: Path) -> tuple[KeyDir, set[Key]]:
    """A key directory over a table of 600 rows (every tenth unmeasured),
    with 45 CRDTs created since (unmeasured, in the overlay) and one of the
    table's unmeasured rows read back (a clean life); every unmeasured key."""
    table_keys = sorted(("n", f"gc:{i:04d}") for i in range(600))
    _write_table(tmp_path, table_keys)
    table = open_table(str(tmp_path), [])
    assert table is not None
    index = KeyDir()
    index.attach(table)
    unmeasured = {key for i, key in enumerate(table_keys) if i % 10 == 0}
    for i in range(45):
        key = ("n", f"gc:new{i:03d}")
        index.add_op(key[0], key[1], f"x{i}", 1, 1000, 10 * i, 20)
        index.note_type(key[0], key[1], "gcounter")
        unmeasured.add(key)
    assert index.get("n", "gc:0100") is not None  # read back: now in the overlay
    return index, unmeasured


def _stream(index: KeyDir, limit: int, count: int) -> list[Key]:
    """Successive calls until ``count`` keys came back (the last call's
    batch cut to fit)."""
    got: list[Key] = []
    while len(got) < count:
        batch = index.unmeasured(limit)
        assert batch, f"ran dry after {len(got)} of {count}"
        assert len(batch) == limit, "a call handed out less than asked, with more to give"
        got.extend(batch)
    return got


def test_successive_calls_hand_out_successive_batches(tmp_path: Path) -> None:
    index, unmeasured = _keydir(tmp_path)
    n = len(unmeasured)
    try:
        assert index.usage("n").unmeasured == n == 105
        stream = _stream(index, 16, 2 * n)
        first = stream[:n]
        assert len(set(first)) == n, "a key came back twice within a round"
        assert set(first) == unmeasured
        # The next round wraps around: the same keys in the same order.
        assert stream[n : 2 * n] == first
        # Keys measured meanwhile are not handed out any more.
        for key in first:
            if key[1].endswith("0") or key[1].endswith("5"):
                index.note_size(key[0], key[1], 33)
        left = [key for key in first if not key[1].endswith(("0", "5"))]
        assert 0 < len(left) < n
        index.unmeasured(1000)  # to the end of this round
        later = _stream(index, 7, len(left))[: len(left)]
        assert sorted(later) == sorted(left)
        # Once every size is known, nothing is handed out and no round kept.
        for key in left:
            index.note_size(key[0], key[1], 33)
        assert index.unmeasured(16) == []
        assert index._unmeasured_round is None and not index._unmeasured_in_round
    finally:
        index.close()


def test_one_call_wraps_around_to_where_it_started(tmp_path: Path) -> None:
    index, unmeasured = _keydir(tmp_path)
    try:
        start = index.unmeasured(1)  # as the start-up's check whether any exist
        rest = index.unmeasured(1000)
        assert len(rest) == len(unmeasured)  # the rest, then the first again
        assert set(rest) == unmeasured and rest[-1] == start[0]
    finally:
        index.close()


def test_lives_that_leave_memory_during_a_round_are_still_handed_out(tmp_path: Path) -> None:
    """Unmeasured clean lives (read back from the table) that the overlay
    lets go mid-round (reading other rows back, as measuring does) are in
    the table still: the round hands them out from there."""
    table_keys = sorted(("n", f"gc:{i:04d}") for i in range(600))
    _write_table(tmp_path, table_keys)
    table = open_table(str(tmp_path), [])
    assert table is not None
    index = KeyDir(cached_lives=20)
    index.attach(table)
    try:
        unmeasured = {key for i, key in enumerate(table_keys) if i % 10 == 0}
        read_back = sorted(unmeasured)[:20]
        for key in read_back:
            assert index.get(*key) is not None  # clean lives, unmeasured
        first = index.unmeasured(5)  # the round began with those 20 in memory
        for key in table_keys[300:340]:  # 40 rows read back: the 20 leave memory
            index.get(*key)
        assert not any(key in index._lives for key in read_back[5:])
        rest = _stream(index, 5, len(unmeasured) - 5)
        assert sorted(first + rest) == sorted(unmeasured)
    finally:
        index.close()
