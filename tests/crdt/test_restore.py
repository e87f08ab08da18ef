"""Restore at the CRDT layer: ``restore_ops`` takes a state back to an earlier one.

For random op histories of every restorable type: the state at N is a fresh
replica that applied deltas 1..N; the ops ``restore_ops`` gives, applied to
the current state, make its read value equal that one's; and restoring while
another replica edits concurrently converges once they exchange deltas.
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
from syncd.crdt.rga import Rga
from syncd.crdt.tree import Tree
from syncd.errors import ApiError
from tests.crdt.crdt_testlib import (
    PROPERTY,
    Server,
    check_tree_invariant,
    delivery,
    run_server,
)
from tests.crdt.test_crdt_convergence import lww_op, orset_op, pncounter_op, tree_op

RESTORER = 9
"""The client id the restore's ops are applied as (a client of its own)."""


def rga_op(data: st.DataObject, server: Server) -> dict[str, Any]:
    assert isinstance(server.crdt, Rga)
    length = server.crdt.length
    if length and data.draw(st.integers(0, 2)) == 0:
        index = data.draw(st.integers(0, length - 1))
        return {"op": "delete", "index": index, "count": data.draw(st.integers(1, length - index))}
    op: dict[str, Any] = {"op": "insert", "index": data.draw(st.integers(0, length))}
    if data.draw(st.booleans()):
        op["text"] = data.draw(st.text("abcé", min_size=1, max_size=4))
    else:
        op["values"] = data.draw(st.lists(st.integers(0, 9) | st.none(), min_size=1, max_size=3))
    return op


CASES: list[tuple[type[Crdt], Any]] = [
    (PNCounter, pncounter_op),
    (ORSet, orset_op),
    (LWWRegister, lww_op),
    (Rga, rga_op),
    (Tree, tree_op),
]
IDS = [cls.TYPE for cls, _ in CASES]


def at(cls: type[Crdt], deltas: list[dict[str, Any]], n: int) -> Crdt:
    replica = cls.new()
    for delta in deltas[:n]:
        replica.apply_delta(delta)
    return replica


def value(crdt: Crdt, server: Server) -> Any:
    return crdt.view(server.now_ms)["value"]


def restore(server: Server, target: Crdt) -> list[dict[str, Any]]:
    """Apply the restore's ops at the server (each must be accepted); their deltas."""
    before = server.crdt.state()
    ops = server.crdt.restore_ops(target)
    assert server.crdt.state() == before, "restore_ops changed the state"
    deltas = []
    for op in ops:
        delta = server.apply(RESTORER, op)
        assert delta is not None, f"restore op {op} was refused"
        deltas.append(delta)
    return deltas


@pytest.mark.parametrize(("cls", "make_op"), CASES, ids=IDS)
@PROPERTY
@given(data=st.data())
def test_restore_to_n_reads_as_the_state_at_n(
    cls: type[Crdt], make_op: Any, data: st.DataObject
) -> None:
    server = run_server(data, cls, make_op, max_ops=30)
    n = data.draw(st.integers(0, len(server.deltas)), label="n")
    target = at(cls, server.deltas, n)
    restore(server, target)
    check_tree_invariant(server.crdt)
    assert value(server.crdt, server) == value(target, server)
    # Restoring to where it already is does nothing.
    assert server.crdt.restore_ops(at(cls, server.deltas, len(server.deltas))) == []


@pytest.mark.parametrize(("cls", "make_op"), CASES, ids=IDS)
@PROPERTY
@given(data=st.data())
def test_restore_and_concurrent_edits_converge(
    cls: type[Crdt], make_op: Any, data: st.DataObject
) -> None:
    """The restore's ops and other clients' ops, interleaved at the server as
    syncd orders them, reach replicas in any order (with repeats): every
    replica ends with the server's state."""
    server = run_server(data, cls, make_op, max_ops=20)
    n = data.draw(st.integers(0, len(server.deltas)), label="n")
    target = at(cls, server.deltas, n)
    ops = server.crdt.restore_ops(target)
    for op in ops:
        for _ in range(data.draw(st.integers(0, 2), label="others before")):
            server.now_ms += 3
            server.apply(data.draw(st.integers(1, 3)), make_op(data, server))
        server.apply(RESTORER, op)  # refused only if another op made it moot
    for _ in range(data.draw(st.integers(0, 3), label="others after")):
        server.apply(data.draw(st.integers(1, 3)), make_op(data, server))
    check_tree_invariant(server.crdt)
    n_deltas = len(server.deltas)
    for r in range(2):
        replica = cls.new()
        # An RGA delta needs its origin first (subscribers get deltas in seq
        # order); every other type takes them in any order.
        order = (
            [*range(n_deltas), *range(n_deltas)]
            if cls is Rga
            else delivery(data, n_deltas, f"replica {r}")
        )
        for i in order:
            replica.apply_delta(server.deltas[i])
        check_tree_invariant(replica)
        assert replica.state() == server.crdt.state()


@pytest.mark.parametrize("cls", [GCounter, Presence], ids=["gcounter", "presence"])
def test_types_that_cannot_go_back_say_why(cls: type[Crdt]) -> None:
    assert not cls.RESTORABLE
    with pytest.raises(ApiError) as refused:
        cls.new().restore_ops(cls.new())
    assert (refused.value.status, refused.value.code) == (409, "not_restorable")
    assert refused.value.message


def test_rga_brings_deleted_text_back_in_place_and_drops_later_text() -> None:
    server = Server(Rga)
    server.apply(1, {"op": "insert", "index": 0, "text": "hello world"})
    target = at(Rga, server.deltas, 1)
    server.apply(2, {"op": "delete", "index": 0, "count": 6})  # "world"
    server.apply(1, {"op": "insert", "index": 5, "text": "!!"})  # "world!!"
    ops = restore(server, target)
    assert server.crdt.view(0)["text"] == "hello world"
    assert len(ops) == 2  # one insert of the run "hello ", one delete of "!!"


def test_tree_moves_back_without_a_cycle_and_readds_deleted_nodes() -> None:
    server = Server(Tree)
    for op in (
        {"op": "add", "id": "a", "data": {"n": 1}},
        {"op": "add", "id": "b", "parent": "a"},
        {"op": "add", "id": "c", "parent": "b"},
    ):
        server.apply(1, op)
    target = at(Tree, server.deltas, 3)
    server.apply(1, {"op": "move", "id": "b", "parent": "root"})
    server.apply(1, {"op": "move", "id": "a", "parent": "c"})  # a under c under b: reversed
    server.apply(1, {"op": "delete", "id": "a"})
    server.apply(1, {"op": "add", "id": "z"})
    restore(server, target)
    assert server.crdt.view(0) == target.view(0)
