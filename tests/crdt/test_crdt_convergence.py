"""Properties every CRDT type here must have.

* Random ops from 2-4 clients applied in order at a server; the deltas
  delivered to 2-4 replicas in arbitrary orders with duplicates: every replica
  ends with exactly the server's state (and view).
* States built from random ops obey the merge laws (commutative, associative,
  idempotent), and a merge equals the replica that received both sides' deltas.
* ``from_state(state())`` round-trips through msgpack and JSON.
* A refused op leaves the state untouched (checked by :class:`Server`).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from syncd.crdt.base import Crdt
from syncd.crdt.gcounter import GCounter
from syncd.crdt.lwwregister import LWWRegister
from syncd.crdt.orset import ORSet
from syncd.crdt.pncounter import PNCounter
from syncd.crdt.presence import Presence
from syncd.crdt.tree import ROOT, Tree
from syncd.crdt.validate import shown_json
from tests.crdt.crdt_testlib import (
    PROPERTY,
    Server,
    check_tree_invariant,
    delivery,
    json_objects,
    json_values,
    roundtrip_json,
    roundtrip_msgpack,
    run_server,
    subset,
)


def _amount(data: st.DataObject) -> dict[str, Any]:
    if data.draw(st.booleans()):
        return {}
    return {"amount": data.draw(st.integers(1, 1000) | st.sampled_from([0, -1, 2**53, True]))}


def gcounter_op(data: st.DataObject, server: Server) -> dict[str, Any]:
    return {"op": "increment", **_amount(data)}


def pncounter_op(data: st.DataObject, server: Server) -> dict[str, Any]:
    return {"op": data.draw(st.sampled_from(["increment", "decrement"])), **_amount(data)}


ELEMENTS = (
    st.sampled_from([0, 1.0, 1, [1.0], [1], "a", [1, 2], {"k": "v", "a": [None]}, None])
    | json_values
)


def orset_op(data: st.DataObject, server: Server) -> dict[str, Any]:
    return {
        "op": data.draw(st.sampled_from(["add", "add", "remove"])),
        "element": data.draw(ELEMENTS),
    }


def lww_op(data: st.DataObject, server: Server) -> dict[str, Any]:
    op: dict[str, Any] = {"op": "set", "value": data.draw(json_values)}
    if data.draw(st.booleans()):
        # Around the server clock, past the 60 s limit too, with repeats likely.
        op["timestamp"] = server.now_ms + data.draw(
            st.sampled_from([-5000, -1, 0, 0, 3, 60_000, 60_001])
        )
    return op


def presence_op(data: st.DataObject, server: Server) -> dict[str, Any]:
    if data.draw(st.integers(0, 3)) == 0:
        return {"op": "leave"}
    op: dict[str, Any] = {"op": "update"}
    if data.draw(st.booleans()):
        op["data"] = data.draw(json_objects)
    if data.draw(st.booleans()):
        op["ttl_ms"] = data.draw(st.sampled_from([999, 1000, 5000, 30_000, 300_000, 300_001]))
    return op


NODE_IDS = ["a", "b", "c", "d", "e", "f"]


def tree_op(data: st.DataObject, server: Server) -> dict[str, Any]:
    assert isinstance(server.crdt, Tree)
    present = sorted(server.crdt.node_ids())
    kind = data.draw(st.sampled_from(["add", "add", "move", "move", "update", "delete"]))
    node = data.draw(st.sampled_from([*NODE_IDS, ROOT]))
    op: dict[str, Any] = {"op": kind, "id": node}
    if kind in ("add", "move"):
        op["parent"] = data.draw(st.sampled_from([*present, "nowhere"]))
        if data.draw(st.booleans()):
            op["pos"] = data.draw(st.sampled_from(["a", "b", "m"]))
    if kind == "add" and data.draw(st.booleans()):
        op["data"] = data.draw(json_objects)
    if kind == "update":
        op["data"] = data.draw(json_objects)
    return op


CASES: list[tuple[type[Crdt], Any]] = [
    (GCounter, gcounter_op),
    (PNCounter, pncounter_op),
    (ORSet, orset_op),
    (LWWRegister, lww_op),
    (Presence, presence_op),
    (Tree, tree_op),
]
IDS = [cls.TYPE for cls, _ in CASES]


def view_times(server: Server) -> list[int]:
    # Presence views depend on the time; look before, at and long after the last op.
    return [server.now_ms - 100_000, server.now_ms, server.now_ms + 29_000, server.now_ms + 400_000]


def shown(crdt: Crdt, state: Any) -> str:
    """``state`` (a state or a view) as a read shows it, where Python's
    equality cannot see the difference (``1 == 1.0 == True``)."""
    return shown_json(state)


def assert_same(a: Crdt, b: Crdt, server: Server) -> None:
    assert a.state() == b.state()
    assert shown(a, a.state()) == shown(b, b.state())
    for now in view_times(server):
        assert a.view(now) == b.view(now)
        assert shown(a, a.view(now)) == shown(b, b.view(now))


def replica_of(cls: type[Crdt], deltas: list[dict[str, Any]], order: list[int]) -> Crdt:
    replica = cls.new()
    for i in order:
        replica.apply_delta(deltas[i])
        check_tree_invariant(replica)
    return replica


def merged(a: Crdt, b: Crdt) -> Crdt:
    before = a.state()
    out = a.clone()
    out.merge(b)
    assert a.state() == before, "merge into a clone changed the original"
    return out


@pytest.mark.parametrize(("cls", "make_op"), CASES, ids=IDS)
@PROPERTY
@given(data=st.data())
def test_replicas_converge_to_the_server(
    cls: type[Crdt], make_op: Any, data: st.DataObject
) -> None:
    server = run_server(data, cls, make_op)
    check_tree_invariant(server.crdt)
    n = len(server.deltas)
    for r in range(data.draw(st.integers(2, 4), label="replicas")):
        replica = replica_of(cls, server.deltas, delivery(data, n, f"replica {r}"))
        assert_same(replica, server.crdt, server)
        # Re-delivering everything again changes nothing (idempotence).
        for delta in server.deltas:
            replica.apply_delta(delta)
        assert replica.state() == server.crdt.state()


@pytest.mark.parametrize(("cls", "make_op"), CASES, ids=IDS)
@PROPERTY
@given(data=st.data())
def test_merge_laws(cls: type[Crdt], make_op: Any, data: st.DataObject) -> None:
    server = run_server(data, cls, make_op)
    n = len(server.deltas)
    picks = [subset(data, n, f"subset {k}") for k in range(3)]
    a, b, c = (
        replica_of(cls, server.deltas, data.draw(st.permutations(p), label="order")) for p in picks
    )
    assert merged(a, b).state() == merged(b, a).state()
    assert shown(a, merged(a, b).state()) == shown(a, merged(b, a).state())
    assert merged(merged(a, b), c).state() == merged(a, merged(b, c)).state()
    assert merged(a, a).state() == a.state()
    union = replica_of(cls, server.deltas, sorted(set(picks[0]) | set(picks[1])))
    assert_same(merged(a, b), union, server)
    full = replica_of(cls, server.deltas, list(range(n)))
    assert_same(merged(merged(merged(a, b), c), full), server.crdt, server)
    assert_same(merged(full, merged(c, a)), server.crdt, server)


@pytest.mark.parametrize(("cls", "make_op"), CASES, ids=IDS)
@PROPERTY
@given(data=st.data())
def test_state_round_trips(cls: type[Crdt], make_op: Any, data: st.DataObject) -> None:
    server = run_server(data, cls, make_op)
    partial = replica_of(cls, server.deltas, subset(data, len(server.deltas), "partial")[::-1])
    for crdt in (server.crdt, partial):
        state = crdt.state()
        for trip in (roundtrip_msgpack, roundtrip_json):
            copy = cls.from_state(trip(state))
            assert_same(copy, crdt, server)
    # A replica that starts from a snapshot and gets the remaining deltas catches up.
    cut = data.draw(st.integers(0, len(server.deltas)), label="cut")
    start = replica_of(cls, server.deltas, list(range(cut)))
    replica = cls.from_state(roundtrip_msgpack(start.state()))
    for delta in server.deltas[cut:]:
        replica.apply_delta(delta)
    assert_same(replica, server.crdt, server)


@pytest.mark.parametrize(("cls", "make_op"), CASES, ids=IDS)
@PROPERTY
@given(data=st.data())
def test_clone_is_independent(cls: type[Crdt], make_op: Any, data: st.DataObject) -> None:
    server = run_server(data, cls, make_op, max_ops=10)
    copy = server.crdt.clone()
    before = server.crdt.state()
    extra = Server(cls)
    extra.crdt = copy
    extra.now_ms = server.now_ms + 1
    extra.seq = server.seq
    for _ in range(5):
        extra.apply(data.draw(st.integers(1, 4)), make_op(data, extra))
    assert server.crdt.state() == before
