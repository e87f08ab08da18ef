"""gcounter and pncounter: ops, validation, views, overflow."""

from __future__ import annotations

from typing import Any

import pytest

from syncd.crdt.gcounter import MAX_COUNT, GCounter
from syncd.crdt.pncounter import PNCounter
from syncd.crdt.validate import MAX_AMOUNT
from syncd.errors import ApiError
from tests.crdt.crdt_testlib import ctx


def refuse(crdt: Any, op: dict[str, Any], field: str, client_id: int = 1) -> None:
    before = crdt.state()
    with pytest.raises(ApiError) as info:
        crdt.apply_op(op, ctx(client_id))
    assert (info.value.status, info.value.code) == (400, "invalid_op")
    assert info.value.message.startswith(f"{field}:"), info.value.message
    assert crdt.state() == before


def test_gcounter_increments_per_client_and_views_counts() -> None:
    counter = GCounter.new()
    assert counter.view(0) == {"value": 0, "counts": {}}
    delta = counter.apply_op({"op": "increment"}, ctx(7))
    assert delta == {"op": "increment", "client_id": 7, "amount": 1, "count": 1}
    counter.apply_op({"op": "increment", "amount": 5}, ctx(12))
    counter.apply_op({"op": "increment", "amount": 2}, ctx(7))
    assert counter.view(0) == {"value": 8, "counts": {"7": 3, "12": 5}}
    assert counter.state() == {"counts": {"7": 3, "12": 5}}
    assert counter.answer(delta) == {}


@pytest.mark.parametrize("amount", [0, -1, MAX_AMOUNT + 1, 1.0, 1.5, "1", None, True, False, [1]])
def test_counter_amount_must_be_an_integer_in_range(amount: Any) -> None:
    refuse(GCounter.new(), {"op": "increment", "amount": amount}, "amount")
    refuse(PNCounter.new(), {"op": "decrement", "amount": amount}, "amount")


def test_counter_amount_limits_are_inclusive() -> None:
    counter = GCounter.new()
    counter.apply_op({"op": "increment", "amount": MAX_AMOUNT}, ctx())
    counter.apply_op({"op": "increment", "amount": 1}, ctx())
    assert counter.view(0)["value"] == MAX_AMOUNT + 1


def test_a_clients_count_cannot_pass_the_64_bit_range() -> None:
    counter = GCounter.from_state({"counts": {"1": MAX_COUNT - 5}})
    counter.apply_op({"op": "increment", "amount": 5}, ctx(1))
    refuse(counter, {"op": "increment", "amount": 1}, "amount")
    counter.apply_op({"op": "increment", "amount": 1}, ctx(2))
    assert counter.view(0)["counts"] == {"1": MAX_COUNT, "2": 1}
    pn = PNCounter.from_state({"p": {}, "n": {"1": MAX_COUNT}})
    refuse(pn, {"op": "decrement"}, "amount")
    pn.apply_op({"op": "increment"}, ctx(1))


@pytest.mark.parametrize("name", ["decrement", "add", None, 1])
def test_gcounter_refuses_other_ops(name: Any) -> None:
    refuse(GCounter.new(), {"op": name}, "op")


def test_pncounter_views_p_and_n() -> None:
    counter = PNCounter.new()
    assert counter.view(0) == {"value": 0, "p": {}, "n": {}}
    counter.apply_op({"op": "increment", "amount": 10}, ctx(1))
    delta = counter.apply_op({"op": "decrement", "amount": 3}, ctx(2))
    assert delta == {"op": "decrement", "client_id": 2, "amount": 3, "count": 3}
    counter.apply_op({"op": "decrement", "amount": 9}, ctx(1))
    assert counter.view(0) == {"value": -2, "p": {"1": 10}, "n": {"1": 9, "2": 3}}
    refuse(counter, {"op": "set"}, "op")


def test_counter_deltas_are_idempotent_and_order_free() -> None:
    server = PNCounter.new()
    deltas = [
        server.apply_op({"op": "increment", "amount": 2}, ctx(1)),
        server.apply_op({"op": "increment", "amount": 3}, ctx(1)),
        server.apply_op({"op": "decrement", "amount": 4}, ctx(1)),
    ]
    replica = PNCounter.new()
    for delta in reversed(deltas + deltas):
        replica.apply_delta(delta)
    assert replica.view(0) == server.view(0) == {"value": 1, "p": {"1": 5}, "n": {"1": 4}}


def test_counter_from_state_refuses_garbage() -> None:
    with pytest.raises(ValueError):
        GCounter.from_state({"counts": {"1": -3}})
    with pytest.raises(ValueError):
        PNCounter.from_state({"p": {"1": "x"}, "n": {}})
