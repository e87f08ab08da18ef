"""rga: a delete costs what the runs it touches cost, not what the ids in them do.

A select-all delete of a big document deletes every run at once. Within
the sequence each run is marked deleted whole and only the two ends of a
range are split, so deleting 8 times the ids held in the same number of
runs costs about the same, whichever way the delete comes: an index and a
count (an editor), id ranges (a delta from another replica), or id runs (a
revert). The ids op of a client reads each id string, which is checked in
test_delete_ids_cost.py. CPU time (the machine is shared), the best of
several runs, inputs a factor of 8 apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from syncd.crdt.rga import Rga
from syncd.crdt.rga.ids import IdRuns
from tests.crdt.crdt_testlib import ctx

RUNS = 2000
"""Runs in each timed document, by two clients in turn so that none join."""

SHORT = 16
"""Elements per run in the smaller document; the larger holds 8 times as many."""

SCALE = 8

MAX_RATIO = 3.0
"""8 times the ids in the same runs may cost at most this many times as
much (about 1 here; 8 would be a cost per id)."""


def _interleaved(runs: int, length: int) -> Rga:
    rga = Rga.new()
    for i in range(runs):
        rga.apply_op({"op": "insert", "index": rga.length, "text": "x" * length}, ctx(1 + i % 2))
    return rga


Way = Callable[[Rga, list[list[int]]], Callable[[], Any]]
"""Given a copy of the document and its ranges, the call that deletes them all."""


def _by_index(rga: Rga, ranges: list[list[int]]) -> Callable[[], Any]:
    return lambda: rga.apply_op({"op": "delete", "index": 0, "count": rga.length}, ctx())


def _by_delta(rga: Rga, ranges: list[list[int]]) -> Callable[[], Any]:
    delta = {"op": "delete", "ranges": ranges}
    return lambda: rga.apply_delta(delta)


def _by_id_runs(rga: Rga, ranges: list[list[int]]) -> Callable[[], Any]:
    ids = IdRuns([(client, first, count) for client, first, count in ranges])
    return lambda: rga.apply_op({"op": "delete", "ids": ids}, ctx())


def _best_cpu(base: Rga, ranges: list[list[int]], way: Way) -> float:
    best = float("inf")
    for _ in range(5):
        call = way(base.clone(), ranges)
        start = time.process_time()
        call()
        best = min(best, time.process_time() - start)
    return best


@pytest.mark.parametrize("way", [_by_index, _by_delta, _by_id_runs], ids=["index", "delta", "ids"])
def test_deleting_every_element_costs_the_same_for_8_times_the_ids_in_as_many_runs(
    way: Way,
) -> None:
    took = []
    for length in (SHORT, SCALE * SHORT):
        base = _interleaved(RUNS, length)
        ranges = base.clone().apply_op({"op": "delete", "index": 0, "count": base.length}, ctx())[
            "ranges"
        ]
        assert len(ranges) == RUNS
        done = base.clone()
        way(done, ranges)()
        assert done.length == 0 and done.state() == _deleted_state(base)
        took.append(_best_cpu(base, ranges, way))
    assert took[1] < MAX_RATIO * took[0], took


def _deleted_state(base: Rga) -> Any:
    rga = base.clone()
    rga.apply_op({"op": "delete", "ids": rga.ids()}, ctx())
    return rga.state()
