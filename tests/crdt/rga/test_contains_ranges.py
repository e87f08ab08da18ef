"""rga: checking many id ranges at once answers what checking each does.

:meth:`RunSeq.contains_ranges` settles the ranges of a writer with many of
them by maps over a flat copy of its runs, and looks up one by one only
those that do not lie within a run they start. On seeded random documents
(several writers, inserts and deletes at random places: runs cut, deleted
runs) it must answer ``all(contains(...))`` for ranges that exist, start
or end past a run, straddle a gap in a writer's counters, name a writer
that never wrote, or are empty; and the delete op and delta refuse what
it refuses with the same error as before.
"""

from __future__ import annotations

import random

import pytest

from syncd.crdt.rga import Rga
from syncd.errors import ApiError
from tests.crdt.crdt_testlib import ctx
from tests.crdt.rga.test_delete_bulk import _document


def _some_ranges(rnd: random.Random, rga: Rga, many: bool) -> list[list[int]]:
    runs = [(run.client, run.counter, run.n) for run in rga._seq.runs()]
    out: list[list[int]] = []
    for _ in range(rnd.randint(1, len(runs) if many else 4)):
        client, counter, n = rnd.choice(runs)
        kind = rnd.randrange(6)
        if kind == 0:
            out.append([client, counter, n])  # a whole run
        elif kind == 1:
            k = rnd.randrange(n)
            out.append([client, counter + k, rnd.randint(1, n - k)])  # inside one
        elif kind == 2:
            out.append([client, counter, n + rnd.randint(1, 5)])  # past its end
        elif kind == 3:
            out.append([client, max(1, counter - rnd.randint(1, 3)), n])  # from before it
        elif kind == 4:
            out.append([client + 10, counter, 1])  # a writer that never wrote
        else:
            out.append([client, counter + n + rnd.randint(0, 50), 1])  # maybe in a gap
    if rnd.random() < 0.5:
        out.sort()
    return out


@pytest.mark.parametrize("many", [False, True], ids=["few", "many"])
@pytest.mark.parametrize("seed", range(40))
def test_contains_ranges_answers_what_each_range_does(seed: int, many: bool) -> None:
    rnd = random.Random(f"{seed}-{many}")
    rga = _document(rnd, rnd.choice([40, 300]))
    seq = rga._seq
    for _ in range(5):
        ranges = _some_ranges(rnd, rga, many)
        one_by_one = all(seq.contains(c, k, n) for c, k, n in ranges)
        assert seq.contains_ranges(ranges) == one_by_one
        # Only the existing ones: all there.
        real = [r for r in ranges if seq.contains(*r)]
        assert seq.contains_ranges(real)
    assert seq.contains_ranges([])


def test_a_select_all_with_one_unknown_id_is_refused_whole() -> None:
    rga = Rga.new()
    for i in range(400):
        rga.apply_op({"op": "insert", "index": rga.length, "text": "x"}, ctx(1 + i % 2))
    ids = rga.ids()
    before = rga.state()
    with pytest.raises(ApiError) as info:
        rga.apply_op({"op": "delete", "ids": [*ids, "9999@2"]}, ctx())
    assert info.value.message == "ids: unknown element id 9999@2"
    ranges = [[run.client, run.counter, run.n] for run in rga._seq.runs()]
    with pytest.raises(ValueError, match="unknown element in 9999@1"):
        rga.apply_delta({"op": "delete", "ranges": [*ranges, [1, 9999, 1]]})
    assert rga.state() == before
    delta = rga.apply_op({"op": "delete", "ids": ids}, ctx())
    assert rga.length == 0
    other = Rga.from_state(before)
    other.apply_delta(delta)
    assert other.state() == rga.state()


@pytest.mark.parametrize("seed", range(10))
def test_ranges_over_many_runs_with_gaps_in_the_counters(seed: int) -> None:
    """One writer typing backwards (a run per element, so that a range
    covers many runs and spans chunks of the id index), another now and
    then (a gap in the first one's counters)."""
    rnd = random.Random(seed)
    rga = Rga.new()
    for _ in range(1500):
        client = 2 if rnd.random() < 0.01 else 1
        rga.apply_op({"op": "insert", "index": 0, "text": "x"}, ctx(client))
    seq = rga._seq
    top = seq.clock
    for _ in range(30):
        first = rnd.randint(1, top)
        ranges = [[1, first, rnd.randint(1, top - first + 1)]]
        assert seq.contains_ranges(ranges) == seq.contains(1, ranges[0][1], ranges[0][2])
