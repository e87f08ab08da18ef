"""The replay tail: contiguity, epochs, deletes, bounds."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncd.store.tail import ReplayTail
from tests.store.support import deleted, op, seqs

MAX_EXAMPLES = int(os.environ.get("SYNCD_HYPOTHESIS_EXAMPLES", "150"))


def filled(n: int, **kwargs: int) -> ReplayTail:
    tail = ReplayTail(**kwargs)
    for seq in range(1, n + 1):
        tail.add(seq, op(seq))
    return tail


def test_returns_the_ops_after_since() -> None:
    tail = filled(10)
    assert seqs(tail.since("n", "gc:a", "e1", 0) or []) == list(range(1, 11))
    assert seqs(tail.since("n", "gc:a", "e1", 7) or []) == [8, 9, 10]


def test_an_up_to_date_client_gets_nothing_to_replay() -> None:
    assert filled(10).since("n", "gc:a", "e1", 10) == []


def test_none_when_the_client_claims_more_than_is_known() -> None:
    assert filled(10).since("n", "gc:a", "e1", 11) is None


def test_none_for_an_unknown_crdt_or_another_epoch() -> None:
    tail = filled(3)
    assert tail.since("n", "gc:b", "e1", 0) is None
    assert tail.since("other", "gc:a", "e1", 0) is None
    assert tail.since("n", "gc:a", "e2", 0) is None


def test_per_crdt_bound_drops_the_oldest() -> None:
    tail = filled(20, per_crdt=5)
    assert len(tail) == 5
    assert seqs(tail.since("n", "gc:a", "e1", 15) or []) == [16, 17, 18, 19, 20]
    assert tail.since("n", "gc:a", "e1", 14) is None  # op 15 is no longer held


def test_a_gap_starts_the_run_afresh() -> None:
    tail = filled(5)
    tail.add(6, op(8))  # 6 and 7 never arrived here
    assert tail.since("n", "gc:a", "e1", 5) is None
    assert seqs(tail.since("n", "gc:a", "e1", 7) or []) == [8]


def test_a_new_epoch_replaces_the_old_life() -> None:
    tail = filled(5)
    tail.add(6, op(1, epoch="e2"))
    assert tail.since("n", "gc:a", "e1", 3) is None
    assert seqs(tail.since("n", "gc:a", "e2", 0) or []) == [1]
    assert len(tail) == 1


def test_deleted_clears_the_crdt() -> None:
    tail = filled(5)
    tail.add(6, op(1, crdt="gc:b"))
    tail.add(7, deleted("gc:a"))
    assert tail.since("n", "gc:a", "e1", 0) is None
    assert len(tail) == 1 and tail.crdt_count == 1


def test_global_bound_evicts_the_least_recently_written_crdt() -> None:
    tail = ReplayTail(per_crdt=10, total=12)
    lsn = 0
    for crdt in ("a", "b", "c"):
        for seq in range(1, 5):
            lsn += 1
            tail.add(lsn, op(seq, crdt=crdt))
    lsn += 1
    tail.add(lsn, op(5, crdt="a"))  # "a" is now the most recent; "b" the least
    assert len(tail) <= 12
    assert tail.since("n", "b", "e1", 0) is None
    assert seqs(tail.since("n", "a", "e1", 0) or []) == [1, 2, 3, 4, 5]
    assert seqs(tail.since("n", "c", "e1", 0) or []) == [1, 2, 3, 4]


def test_global_bound_smaller_than_one_run_trims_that_run() -> None:
    tail = filled(10, per_crdt=100, total=4)
    assert len(tail) == 4
    assert seqs(tail.since("n", "gc:a", "e1", 6) or []) == [7, 8, 9, 10]


def test_records_it_cannot_read_are_ignored() -> None:
    tail = filled(3)
    tail.add(4, {"kind": "op", "ns": "n", "id": "gc:a", "seq": "4", "epoch": "e1"})
    tail.add(5, {"kind": "op", "ns": "n", "id": "gc:a", "seq": True, "epoch": "e1"})
    tail.add(6, {"kind": "other"})
    tail.add(7, {"kind": "deleted", "ns": 1, "id": None})
    assert seqs(tail.since("n", "gc:a", "e1", 0) or []) == [1, 2, 3]


def test_export_respects_max_lsn_and_recency_order() -> None:
    tail = ReplayTail()
    tail.add(1, op(1, crdt="a"))
    tail.add(2, op(1, crdt="b"))
    tail.add(3, op(2, crdt="a"))
    tail.add(4, op(2, crdt="b"))
    # "b" was written last, so it comes last (loading in this order keeps recency).
    assert [(r["id"], r["seq"]) for r in tail.export(3)] == [("a", 1), ("a", 2), ("b", 1)]
    assert len(tail.export(4)) == 4


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError):
        ReplayTail(per_crdt=0)
    with pytest.raises(ValueError):
        ReplayTail(total=0)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["op", "skip", "del", "epoch"])),
        max_size=60,
    ),
    st.integers(1, 6),
    st.integers(1, 10),
    st.integers(0, 30),
)
def test_matches_a_model(
    events: list[tuple[str, str]], per_crdt: int, total: int, since: int
) -> None:
    """Whatever ``since`` returns is every op after ``since`` of that life up to the
    last one the tail was given, with nothing missing (the stores give it every
    durable op; "skip" makes the gaps that eviction and restarts can make)."""
    tail = ReplayTail(per_crdt=per_crdt, total=total)
    seq = {"a": 0, "b": 0}
    epoch = {"a": 0, "b": 0}
    last_seen: dict[tuple[str, int], int] = {}
    for lsn, (crdt, event) in enumerate(events, 1):
        if event == "del":
            tail.add(lsn, deleted(crdt))
            epoch[crdt] += 1
            seq[crdt] = 0
            continue
        if event == "epoch":
            epoch[crdt] += 1
            seq[crdt] = 0
        seq[crdt] += 1
        if event != "skip":  # "skip": an op this tail never saw
            tail.add(lsn, op(seq[crdt], crdt=crdt, epoch=f"e{epoch[crdt]}"))
            last_seen[crdt, epoch[crdt]] = seq[crdt]
        assert len(tail) <= total
    for crdt in ("a", "b"):
        got = tail.since("n", crdt, f"e{epoch[crdt]}", since)
        if got is not None:
            last = last_seen[crdt, epoch[crdt]]
            assert seqs(got) == list(range(since + 1, last + 1))
            assert len(got) <= per_crdt


def test_load_joins_the_snapshot_tail_and_the_log() -> None:
    tail = ReplayTail(per_crdt=10, total=50)
    tail.load(2, [op(1, crdt="x"), op(2, crdt="x")], [(3, op(3, crdt="x"))])
    assert seqs(tail.since("n", "x", "e1", 0) or []) == [1, 2, 3]


def test_load_skips_what_cannot_stay_and_never_keeps_a_stale_run() -> None:
    tail = ReplayTail(per_crdt=10, total=5)
    records = [(3, op(3, crdt="x"))] + [(3 + i, op(i, crdt="y")) for i in range(1, 7)]
    tail.load(2, [op(1, crdt="x"), op(2, crdt="x")], records)
    # x's newest op (3) fell outside what is kept: x must not look complete at 2.
    assert tail.since("n", "x", "e1", 0) is None
    assert seqs(tail.since("n", "y", "e1", 1) or []) == [2, 3, 4, 5, 6]
    assert len(tail) == 5
