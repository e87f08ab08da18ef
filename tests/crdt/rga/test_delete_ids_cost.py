"""rga: a delete op of many ids costs what reading its ids costs, not a sort of them.

A select-all delete in an editor sends every id of the document in
document order, which is not sorted (each client's runs interleave). The
op turned every id into a tuple in Python and sorted all of them before it
deleted a thing: 95,000 ids held the event loop for about a second.
:func:`syncd.crdt.rga.ids.id_ranges` reads them at C speed and sorts only
the runs of consecutive ids it finds. The cost is measured against
``json.loads`` of the op's body, which every server pays for the same ids:
CPU time (the machine is shared), the best of several runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from syncd.crdt.rga import Rga
from syncd.crdt.rga.ids import id_ranges, parse_ids, rle_ids
from syncd.errors import ApiError
from tests.crdt.crdt_testlib import PROPERTY, ctx

RUNS = 1000
"""Runs in the timed document, by two clients in turn so that none join."""

RUN_LENGTH = 64
"""Elements per run: 64,000 ids in all."""

JSON_FACTOR = 25
"""How many times ``json.loads`` of the op's body the delete may cost: about
10 here on a quiet machine (21 was seen beside a loaded make test), and
about 40 when the ids were sorted one by one."""


def _best_cpu(make: Callable[[], Callable[[], Any]], runs: int = 5) -> float:
    """The least CPU time of ``runs`` calls, each of a fresh ``make()``."""
    best = float("inf")
    for _ in range(runs):
        call = make()
        start = time.process_time()
        call()
        best = min(best, time.process_time() - start)
    return best


def _best_cpu_interleaved(
    makes: tuple[Callable[[], Callable[[], Any]], Callable[[], Callable[[], Any]]], runs: int = 7
) -> tuple[float, float]:
    """:func:`_best_cpu` of two calls taking turns, so that a burst of load
    on the machine falls on both rather than on one."""
    a, b = float("inf"), float("inf")
    for _ in range(runs):
        a = min(a, _best_cpu(makes[0], 1))
        b = min(b, _best_cpu(makes[1], 1))
    return a, b


def _interleaved(runs: int, length: int) -> Rga:
    rga = Rga.new()
    for i in range(runs):
        rga.apply_op({"op": "insert", "index": rga.length, "text": "x" * length}, ctx(1 + i % 2))
    return rga


def test_deleting_every_id_in_document_order_costs_about_reading_them() -> None:
    base = _interleaved(RUNS, RUN_LENGTH)
    ids = base.ids()
    assert ids != sorted(ids)  # document order: the case that was slow
    body = json.dumps({"op": "delete", "ids": ids})

    def delete() -> Callable[[], Any]:
        rga = base.clone()
        return lambda: rga.apply_op({"op": "delete", "ids": ids}, ctx())

    def decode() -> Callable[[], Any]:
        return lambda: json.loads(body)

    took, floor = _best_cpu_interleaved((delete, decode))
    assert took < JSON_FACTOR * floor, (took, floor)
    rga = base.clone()
    delta = rga.apply_op({"op": "delete", "ids": ids}, ctx())
    assert rga.length == 0
    assert delta["ranges"] == rle_ids(parse_ids(ids, "ids"))


_ID = st.builds(
    lambda client, counter: f"{counter}@{client}", st.integers(-3, 3), st.integers(1, 40)
)
_ODD = st.sampled_from(["07@1", "1@-0", "1@2,3@4", "1@2@3", "", "٣@1", " 1@1", "0@1", 5, None])


@PROPERTY
@given(values=st.lists(st.one_of(_ID, _ID, _ID, _ODD), min_size=1, max_size=40))
def test_id_ranges_are_the_ranges_of_the_ids_one_by_one(values: list[Any]) -> None:
    try:
        expected = rle_ids(parse_ids(values, "ids"))
    except ApiError as error:
        with pytest.raises(ApiError) as info:
            id_ranges(values, "ids")
        assert info.value.message == error.message
        return
    assert id_ranges(values, "ids") == expected


@PROPERTY
@given(
    pieces=st.lists(
        st.tuples(st.integers(-2, 2), st.integers(1, 30), st.integers(1, 8)), min_size=1, max_size=8
    )
)
def test_id_ranges_join_runs_given_in_any_order_and_repeated(
    pieces: list[tuple[int, int, int]],
) -> None:
    values = [f"{first + i}@{client}" for client, first, count in pieces for i in range(count)]
    pairs = sorted({(client, first + i) for client, first, count in pieces for i in range(count)})
    assert id_ranges(values, "ids") == rle_ids(pairs)
