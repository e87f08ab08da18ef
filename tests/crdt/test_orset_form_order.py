"""The form a set element reads in is a function of the set's state, not of
delivery order (docs/data-model.md#orset): ``1`` and ``1.0`` are one element,
and a set keeps the form of the add that made it (add ``1.0`` then ``1``
reads ``1.0``). Each dot keeps a form: a fresh add's own, and an add of an
element already there the form the element read at the writer, which its
delta carries (``form``), so a replica that gets the second add first, or a
merge of two partial replicas, still knows it. An element reads in the form
of its smallest live dot: after concurrent adds in two forms, every replica
shows the same one, and removing that dot shows the next one's form."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from syncd.crdt.base import OpContext
from syncd.crdt.orset import ORSet
from syncd.crdt.validate import shown_json
from tests.crdt.crdt_testlib import PROPERTY, delivery, roundtrip_json, roundtrip_msgpack, subset


def add(crdt: ORSet, element: Any, client_id: int) -> dict[str, Any]:
    delta = crdt.apply_op({"op": "add", "element": element}, OpContext(client_id, 0, 1))
    copy: dict[str, Any] = roundtrip_msgpack(delta)
    return copy


def remove(crdt: ORSet, element: Any, client_id: int) -> dict[str, Any]:
    delta = crdt.apply_op({"op": "remove", "element": element}, OpContext(client_id, 0, 1))
    copy: dict[str, Any] = roundtrip_msgpack(delta)
    return copy


def replica(*deltas: dict[str, Any]) -> ORSet:
    crdt = ORSet.new()
    for delta in deltas:
        crdt.apply_delta(delta)
    return crdt


def shown(crdt: ORSet) -> tuple[str, str]:
    """State and view as a read shows them: in Python 1 == 1.0, which is how
    the old rule slipped past the property tests' state comparisons."""
    return shown_json(crdt.state()), shown_json(crdt.view(0))


def two_adds_of_one_identity() -> tuple[ORSet, dict[str, Any], dict[str, Any]]:
    server = ORSet.new()
    made = add(server, 1.0, 1)
    again = add(server, 1, 2)
    return server, made, again


def test_a_replica_reads_the_servers_form_whatever_the_delivery_order() -> None:
    server, made, again = two_adds_of_one_identity()
    assert shown_json(server.view(0)) == '{"value":[1.0]}'
    assert shown(replica(again, made)) == shown(replica(made, again)) == shown(server)


def test_merging_partial_replicas_is_commutative_for_forms() -> None:
    server, made, again = two_adds_of_one_identity()
    first, second = replica(made), replica(again)
    one_way, other_way = first.clone(), second.clone()
    one_way.merge(second)
    other_way.merge(first)
    assert shown(one_way) == shown(other_way) == shown(server)


def test_a_re_add_carries_the_form_it_keeps_and_a_fresh_add_none() -> None:
    server, made, again = two_adds_of_one_identity()
    assert "form" not in made
    assert again["element"] == 1 and shown_json(again["form"]) == "1.0"
    # The state of one server holds no per-dot forms: every live dot keeps
    # the form its element reads in, and states read as they did before.
    assert server.state() == {"elements": [[1.0, [[2, 1]]]], "vv": {"1": 1, "2": 1}, "cloud": []}
    removed = remove(server, 1, 3)
    made_as_int = add(server, 1, 3)
    assert "form" not in made_as_int
    assert shown_json(server.view(0)) == '{"value":[1]}'
    assert shown(replica(made_as_int, removed, again, made)) == shown(server)


def test_concurrent_adds_read_as_the_smallest_dot_and_a_remove_shows_the_next() -> None:
    # Two nodes of a cluster add one element in two forms at once.
    node_a, node_b = ORSet.new(), ORSet.new()
    as_int = add(node_b, 1, 9)  # dot (9, 1)
    as_float = add(node_a, 1.0, 4)  # dot (4, 1): the smaller
    node_a.apply_delta(as_int)
    node_b.apply_delta(as_float)
    for crdt in (node_a, node_b, replica(as_int, as_float), replica(as_float, as_int)):
        assert shown_json(crdt.view(0)) == '{"value":[1.0]}'
        assert shown(crdt) == shown(node_a)
    state = roundtrip_json(node_a.state())
    assert state["elements"] == [[1.0, [[4, 1], [9, 1]]]] and state["forms"] == [[9, 1, 1]]
    assert shown(ORSet.from_state(state)) == shown(node_a)
    # A remove that observed only the smaller dot: the other one's form shows.
    gone = roundtrip_msgpack({"op": "remove", "element": 1, "dots": [[4, 1]]})
    for crdt in (node_a, node_b):
        crdt.apply_delta(gone)
        assert shown_json(crdt.view(0)) == '{"value":[1]}'
    late = replica(gone, as_float, as_int)
    assert shown(late) == shown(node_a) == shown(node_b)
    assert "forms" not in node_a.state()


def test_key_order_is_a_form_too() -> None:
    # A read writes an object's keys in their order, so a state keeps it.
    node_a, node_b = ORSet.new(), ORSet.new()
    ab = add(node_a, {"a": 1, "b": 2}, 4)
    ba = add(node_b, {"b": 2, "a": 1}, 9)
    for crdt in (node_a, node_b):
        crdt.apply_delta(ab if crdt is node_b else ba)
    gone = {"op": "remove", "element": {"a": 1, "b": 2}, "dots": [[4, 1]]}
    loaded = ORSet.from_state(roundtrip_msgpack(node_a.state()))
    for crdt in (node_a, node_b, loaded):
        assert json.dumps(crdt.view(0)) == '{"value": [{"a": 1, "b": 2}]}'
        crdt.apply_delta(gone)
        assert json.dumps(crdt.view(0)) == '{"value": [{"b": 2, "a": 1}]}'


def test_a_state_written_before_forms_loads_as_it_read() -> None:
    # Every dot of an old state keeps the element's stored form.
    old = {"elements": [[1.0, [[1, 1], [2, 1]]]], "vv": {"1": 1, "2": 1}, "cloud": []}
    crdt = ORSet.from_state(old)
    assert shown_json(crdt.view(0)) == '{"value":[1.0]}'
    assert crdt.state() == old and shown_json(crdt.state()) == shown_json(old)
    crdt.apply_delta({"op": "remove", "element": 1, "dots": [[1, 1]]})
    assert shown_json(crdt.view(0)) == '{"value":[1.0]}'
    # One written when 1 and 1.0 were two elements reads in the first's form
    # (as it did), whichever dot is smaller.
    older = {"elements": [[1, [[5, 1]]], [1.0, [[2, 1]]]], "vv": {"2": 1, "5": 1}, "cloud": []}
    crdt = ORSet.from_state(older)
    assert shown_json(crdt.view(0)) == '{"value":[1]}'
    assert shown_json(ORSet.from_state(crdt.state()).state()) == shown_json(crdt.state())


def test_a_record_written_before_forms_replays_in_seq_order_as_it_read() -> None:
    # An earlier version's re-add wrote no form; replayed in order (a
    # restart, a cluster peer) it keeps the form the element reads in.
    server, made, again = two_adds_of_one_identity()
    old_again = {k: v for k, v in again.items() if k != "form"}
    assert shown(replica(made, old_again)) == shown(server)


# -- properties: several writers, deltas in any order ---------------------

FORMS = st.sampled_from([1, 1.0, [1], [1.0], {"a": 1.0, "b": 2}, {"b": 2.0, "a": 1}, "x", 0.5])


@st.composite
def cluster_history(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Ops at 2-3 nodes, each with its own writers, that see some of each
    other's deltas as they go (so adds of one element in different forms
    are concurrent, and re-adds supersede some dots but not all)."""
    nodes = [ORSet.new() for _ in range(draw(st.integers(2, 3), label="nodes"))]
    deltas: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 30), label="ops")):
        at = draw(st.integers(0, len(nodes) - 1), label="node")
        sync: bool = draw(st.booleans(), label="syncs")
        if deltas and sync:
            for i in draw(st.sets(st.integers(0, len(deltas) - 1), max_size=4), label="sync"):
                nodes[at].apply_delta(deltas[i])
        writer = 10 * at + draw(st.integers(1, 2), label="writer")
        element = draw(FORMS, label="element")
        if draw(st.integers(0, 2), label="kind"):
            deltas.append(add(nodes[at], element, writer))
        else:
            deltas.append(remove(nodes[at], element, writer))
    return deltas


@PROPERTY
@given(deltas=cluster_history(), data=st.data())
def test_every_delivery_order_reads_alike(
    deltas: list[dict[str, Any]], data: st.DataObject
) -> None:
    everything = replica(*deltas)
    for r in range(3):
        order = delivery(data, len(deltas), f"replica {r}")
        one = replica(*(deltas[i] for i in order))
        assert shown(one) == shown(everything)
        assert shown(ORSet.from_state(roundtrip_json(one.state()))) == shown(everything)


@PROPERTY
@given(deltas=cluster_history(), data=st.data())
def test_merge_is_commutative_associative_and_idempotent_for_forms(
    deltas: list[dict[str, Any]], data: st.DataObject
) -> None:
    picks = [subset(data, len(deltas), f"subset {k}") for k in range(3)]
    a, b, c = (
        replica(*(deltas[i] for i in data.draw(st.permutations(p), label="order"))) for p in picks
    )

    def merged(x: ORSet, y: ORSet) -> ORSet:
        out = x.clone()
        out.merge(y)
        return out

    assert shown(merged(a, b)) == shown(merged(b, a))
    assert shown(merged(merged(a, b), c)) == shown(merged(a, merged(b, c)))
    assert shown(merged(a, a)) == shown(a)
    union = replica(*(deltas[i] for i in sorted(set(picks[0]) | set(picks[1]))))
    assert shown(merged(a, b)) == shown(union)
    full = replica(*deltas)
    assert shown(merged(merged(merged(a, b), c), full)) == shown(full)
