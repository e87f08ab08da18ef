"""Known divergence, not fixed (needs a decision on the set's form rule and
its state format, which client replicas share): a set keeps the form of the
add that *made* an element (docs/data-model.md#orset: add ``1.0`` then ``1``
reads ``1.0``). A replica that gets the second add first, or a merge of two
partial replicas, cannot tell which add made it, so the form it shows depends
on delivery order and on which side a merge starts from: ``apply_delta`` is
not order-free and ``merge`` not commutative for forms of one identity."""

from __future__ import annotations

import pytest

from syncd.crdt.base import OpContext
from syncd.crdt.orset import ORSet
from syncd.crdt.validate import shown_json

pytestmark = pytest.mark.xfail(
    strict=True, reason="the form an element reads in depends on delivery order (see docstring)"
)


def two_adds_of_one_identity() -> tuple[ORSet, dict, dict]:  # type: ignore[type-arg]
    server = ORSet.new()
    made = server.apply_op({"op": "add", "element": 1.0}, OpContext(1, 0, 1))
    again = server.apply_op({"op": "add", "element": 1}, OpContext(2, 0, 2))
    return server, made, again


def test_a_replica_reads_the_servers_form_whatever_the_delivery_order() -> None:
    server, made, again = two_adds_of_one_identity()
    assert server.view(0) == {"value": [1.0]}
    replica = ORSet.new()
    replica.apply_delta(again)
    replica.apply_delta(made)
    # As a read shows them: in Python 1 == 1.0, which is how this slipped
    # past the property tests' state comparisons.
    assert shown_json(replica.state()) == shown_json(server.state())


def test_merging_partial_replicas_is_commutative_for_forms() -> None:
    _, made, again = two_adds_of_one_identity()
    first, second = ORSet.new(), ORSet.new()
    first.apply_delta(made)
    second.apply_delta(again)
    one_way, other_way = first.clone(), second.clone()
    one_way.merge(second)
    other_way.merge(first)
    assert shown_json(one_way.state()) == shown_json(other_way.state())
