"""tree: ops, validation, the view, and the move log under reordering."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from syncd.crdt.tree import MAX_NODE_ID_LEN, MAX_POS_LEN, MAX_TREE_DEPTH, ROOT, Tree
from syncd.crdt.validate import MAX_ELEMENT_BYTES, canonical_json
from syncd.errors import ApiError
from tests.crdt.crdt_testlib import PROPERTY, check_tree_invariant, ctx, delivery, roundtrip_msgpack


class Seq:
    """A server-side tree with numbered ops."""

    def __init__(self) -> None:
        self.tree = Tree.new()
        self.deltas: list[dict[str, Any]] = []

    def __call__(self, client_id: int = 1, **op: Any) -> dict[str, Any]:
        delta = self.tree.apply_op(op, ctx(client_id, seq=len(self.deltas) + 1))
        self.deltas.append(roundtrip_msgpack(delta))
        return delta


def refuse(
    tree: Tree, op: dict[str, Any], field: str, status: int = 400, code: str = "invalid_op"
) -> None:
    before = tree.state()
    with pytest.raises(ApiError) as info:
        tree.apply_op(op, ctx())
    assert (info.value.status, info.value.code) == (status, code)
    assert info.value.message.startswith(f"{field}:"), info.value.message
    assert tree.state() == before


def shape(tree: Tree) -> Any:
    def walk(node: dict[str, Any]) -> Any:
        return [node["id"], [walk(child) for child in node["children"]]]

    return walk(tree.view(0)["value"])


def test_empty_tree_view() -> None:
    assert Tree.new().view(0) == {"value": {"id": "root", "data": {}, "children": []}}


def test_add_move_update_delete_and_the_view() -> None:
    op = Seq()
    delta = op(op="add", id="a", parent="root", data={"name": "A"})
    assert delta == {"op": "add", "id": "a", "parent": "root", "data": {"name": "A"}, "ts": [1, 1]}
    op(op="add", id="b", pos="m")
    op(op="add", id="c", parent="a", pos="z")
    op(op="add", id="d", parent="a", pos="z")
    op(op="add", id="e", parent="a", pos="b")
    op(op="add", id="f", parent="a")
    assert op.tree.view(0) == {
        "value": {
            "id": "root",
            "data": {},
            "children": [
                {
                    "id": "a",
                    "data": {"name": "A"},
                    "children": [
                        {"id": "f", "data": {}, "children": []},
                        {"id": "e", "data": {}, "children": []},
                        {"id": "c", "data": {}, "children": []},
                        {"id": "d", "data": {}, "children": []},
                    ],
                },
                {"id": "b", "data": {}, "children": []},
            ],
        }
    }
    delta = op(2, op="move", id="a", parent="b", pos="q")
    assert delta == {"op": "move", "id": "a", "parent": "b", "pos": "q", "ts": [7, 2]}
    op(op="update", id="c", data={"v": 2})
    op(op="update", id="root", data={"title": "t"})
    assert shape(op.tree) == [
        "root",
        [["b", [["a", [["f", []], ["e", []], ["c", []], ["d", []]]]]]],
    ]
    assert op.tree.view(0)["value"]["data"] == {"title": "t"}
    op(op="delete", id="a")
    assert shape(op.tree) == ["root", [["b", []]]]
    assert sorted(op.tree.node_ids()) == ["b", "root"]
    assert op.tree.state() == {
        "upto": 10,
        "nodes": {"b": ["root", "m", {}], "root": [None, None, {"title": "t"}]},
        "log": [],
    }


def test_a_deleted_id_can_be_added_again_without_its_old_subtree() -> None:
    op = Seq()
    op(op="add", id="x")
    op(op="add", id="y", parent="x")
    op(op="delete", id="x")
    op(op="add", id="x", data={"new": True})
    assert op.tree.view(0)["value"]["children"] == [
        {"id": "x", "data": {"new": True}, "children": []}
    ]
    for order in (op.deltas[::-1], [op.deltas[i] for i in (3, 0, 2, 1)]):
        replica = Tree.new()
        for delta in order:
            replica.apply_delta(delta)
            check_tree_invariant(replica)
        assert replica.state() == op.tree.state()


def test_validation_errors_name_the_field() -> None:
    op = Seq()
    op(op="add", id="a")
    op(op="add", id="b", parent="a")
    tree = op.tree
    refuse(tree, {"op": "add", "id": "a"}, "id")
    refuse(tree, {"op": "add", "id": "root"}, "id")
    refuse(tree, {"op": "add", "id": "n", "parent": "ghost"}, "parent")
    refuse(tree, {"op": "add", "id": "n", "parent": 5}, "parent")
    refuse(tree, {"op": "add", "id": "n", "data": [1]}, "data")
    refuse(tree, {"op": "add", "id": "n", "data": {"k": "x" * MAX_ELEMENT_BYTES}}, "data")
    refuse(tree, {"op": "add", "id": "n", "pos": 3}, "pos")
    refuse(tree, {"op": "add", "id": "n", "pos": "p" * (MAX_POS_LEN + 1)}, "pos")
    refuse(tree, {"op": "add", "id": "x" * (MAX_NODE_ID_LEN + 1)}, "id")
    refuse(tree, {"op": "add", "id": ""}, "id")
    refuse(tree, {"op": "add"}, "id")
    refuse(tree, {"op": "move", "id": "ghost", "parent": "root"}, "id")
    refuse(tree, {"op": "move", "id": "a", "parent": "ghost"}, "parent")
    refuse(tree, {"op": "move", "id": "a"}, "parent")
    refuse(tree, {"op": "move", "id": "root", "parent": "a"}, "id")
    refuse(tree, {"op": "update", "id": "ghost", "data": {}}, "id")
    refuse(tree, {"op": "update", "id": "a"}, "data")
    refuse(tree, {"op": "update", "id": "a", "data": "text"}, "data")
    refuse(tree, {"op": "delete", "id": "ghost"}, "id")
    refuse(tree, {"op": "delete", "id": "root"}, "id")
    refuse(tree, {"op": "rename", "id": "a"}, "op")
    tree.apply_op({"op": "add", "id": "x" * MAX_NODE_ID_LEN, "pos": "p" * MAX_POS_LEN}, ctx())


def test_moving_under_its_own_subtree_is_a_409_cycle() -> None:
    op = Seq()
    op(op="add", id="a")
    op(op="add", id="b", parent="a")
    op(op="add", id="c", parent="b")
    refuse(op.tree, {"op": "move", "id": "a", "parent": "c"}, "parent", 409, "cycle")
    refuse(op.tree, {"op": "move", "id": "a", "parent": "a"}, "parent", 409, "cycle")
    op(op="move", id="c", parent="root")
    op(op="move", id="a", parent="c")
    assert shape(op.tree) == ["root", [["c", [["a", [["b", []]]]]]]]


def test_depth_limit() -> None:
    op = Seq()
    parent = ROOT
    for i in range(MAX_TREE_DEPTH):
        op(op="add", id=f"n{i}", parent=parent)
        parent = f"n{i}"
    refuse(op.tree, {"op": "add", "id": "deep", "parent": parent}, "parent")
    op(op="add", id="side")
    op(op="add", id="side2", parent="side")
    # Moving a two-level subtree under the second-deepest node would pass the limit too.
    refuse(op.tree, {"op": "move", "id": "side", "parent": f"n{MAX_TREE_DEPTH - 2}"}, "parent")
    op(op="move", id="side", parent=f"n{MAX_TREE_DEPTH - 3}")
    view = op.tree.view(0)["value"]
    depth = 0
    while view["children"]:
        view = view["children"][0]
        depth += 1
    assert depth == MAX_TREE_DEPTH


def ts(delta: dict[str, Any]) -> tuple[int, int]:
    return (delta["ts"][0], delta["ts"][1])


def test_concurrent_moves_that_would_cycle_are_skipped_in_timestamp_order() -> None:
    # Two replicas moved a under b and b under a at once; the later move loses.
    ops: list[dict[str, Any]] = [
        {"op": "add", "id": "a", "parent": "root", "data": {}, "ts": [1, 1]},
        {"op": "add", "id": "b", "parent": "root", "data": {}, "ts": [2, 1]},
        {"op": "move", "id": "a", "parent": "b", "ts": [3, 1]},
        {"op": "move", "id": "b", "parent": "a", "ts": [4, 2]},
    ]
    for order in ([0, 1, 2, 3], [3, 2, 1, 0], [0, 1, 3, 2], [1, 3, 0, 2]):
        tree = Tree.new()
        for i in order:
            tree.apply_delta(ops[i])
            check_tree_invariant(tree)
        assert shape(tree) == ["root", [["b", [["a", []]]]]]
        assert tree.state()["log"] == []


def test_the_log_holds_only_ops_past_a_gap() -> None:
    op = Seq()
    for name in "abcde":
        op(op="add", id=name)
    assert op.tree.state()["log"] == []
    replica = Tree.new()
    replica.apply_delta(op.deltas[0])
    replica.apply_delta(op.deltas[3])
    replica.apply_delta(op.deltas[4])
    state = replica.state()
    assert state["upto"] == 1
    assert [entry["op"]["id"] for entry in state["log"]] == ["d", "e"]
    copy = Tree.from_state(roundtrip_msgpack(state))
    for replica_ in (replica, copy):
        replica_.apply_delta(op.deltas[2])
        replica_.apply_delta(op.deltas[1])
        assert replica_.state() == op.tree.state()
        assert replica_.state()["log"] == []


def reference_replay(ops: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """A naive model: apply every op in timestamp order, skipping what cannot apply."""
    nodes: dict[str, list[Any]] = {ROOT: [None, None, {}]}

    def under(node: str | None, ancestor: str) -> bool:
        while node is not None:
            if node == ancestor:
                return True
            node = nodes[node][0]
        return False

    for op in sorted(ops, key=ts):
        name, node = op["op"], op["id"]
        if name in ("add", "move"):
            parent = op["parent"]
            if node == ROOT or parent not in nodes or under(parent, node):
                continue
            if name == "add":
                nodes[node] = [parent, op.get("pos"), op.get("data") or {}]
            elif node in nodes:
                nodes[node] = [parent, op.get("pos"), nodes[node][2]]
        elif name == "update":
            if node in nodes:
                nodes[node][2] = op["data"]
        elif node != ROOT and node in nodes:
            doomed = {node}
            changed = True
            while changed:
                changed = False
                for other, (parent, _, _) in nodes.items():
                    if parent in doomed and other not in doomed:
                        doomed.add(other)
                        changed = True
            for gone in doomed:
                del nodes[gone]
    return nodes


POOL = ["a", "b", "c", "d", "e"]


@st.composite
def raw_ops(
    draw: Any, kinds: tuple[str, ...] = ("add", "move", "move", "update", "delete")
) -> list[dict[str, Any]]:
    """Ops made concurrently on replicas, unchecked, with unique Lamport counters."""
    n = draw(st.integers(1, 18))
    counters = draw(st.permutations(list(range(1, n + 1))))
    ops = []
    for counter in counters:
        kind = draw(st.sampled_from(kinds))
        op: dict[str, Any] = {
            "op": kind,
            "id": draw(st.sampled_from(POOL)),
            "ts": [counter, draw(st.integers(1, 3))],
        }
        if kind in ("add", "move"):
            op["parent"] = draw(st.sampled_from([*POOL, ROOT]))
            if draw(st.booleans()):
                op["pos"] = draw(st.sampled_from(["x", "y"]))
        if kind in ("add", "update"):
            op["data"] = {"v": counter}
        ops.append(op)
    return ops


@PROPERTY
@given(ops=raw_ops(), data=st.data())
def test_random_concurrent_ops_in_any_order_match_the_timestamp_order_replay(
    ops: list[dict[str, Any]], data: st.DataObject
) -> None:
    expected = reference_replay(ops)
    states = []
    for r in range(3):
        tree = Tree.new()
        for i in delivery(data, len(ops), f"order {r}"):
            tree.apply_delta(ops[i])
            check_tree_invariant(tree)
        state = tree.state()
        assert state["nodes"] == expected
        assert state["log"] == []
        states.append(state)
    assert states[0] == states[1] == states[2]


@PROPERTY
@given(data=st.data())
def test_concurrent_moves_never_lose_a_node(data: st.DataObject) -> None:
    adds = [
        {"op": "add", "id": name, "parent": ROOT, "data": {}, "ts": [i + 1, 1]}
        for i, name in enumerate(POOL)
    ]
    moves = []
    for counter in range(len(adds) + 1, len(adds) + data.draw(st.integers(1, 25)) + 1):
        node, parent = data.draw(st.sampled_from(POOL)), data.draw(st.sampled_from([*POOL, ROOT]))
        moves.append(
            {
                "op": "move",
                "id": node,
                "parent": parent,
                "ts": [counter, data.draw(st.integers(1, 4))],
            }
        )
    ops = adds + moves
    for r in range(3):
        tree = Tree.new()
        for i in delivery(data, len(ops), f"order {r}"):
            tree.apply_delta(ops[i])
            check_tree_invariant(tree)
        assert sorted(tree.node_ids()) == sorted([*POOL, ROOT])
        view_ids = []
        stack = [tree.view(0)["value"]]
        while stack:
            node = stack.pop()
            view_ids.append(node["id"])
            stack.extend(node["children"])
        assert sorted(view_ids) == sorted([*POOL, ROOT])


def test_a_long_reversed_delivery_stays_fast() -> None:
    op = Seq()
    rng = random.Random(7)
    names = ["n0"]
    op(op="add", id="n0")
    for i in range(1, 300):
        name = f"n{i}"
        op(op="add", id=name, parent=rng.choice(names[-20:]))
        names.append(name)
    replica = Tree.new()
    for delta in reversed(op.deltas):
        replica.apply_delta(delta)
    assert replica.state() == op.tree.state()


@pytest.mark.parametrize(
    ("then", "now"),
    [(1, True), (0, False), (1, 1.0), ({"x": 1}, {"x": 1.0})],
    ids=["1-true", "0-false", "1-float", "nested"],
)
def test_restore_brings_back_data_that_equals_the_target_only_in_python(
    then: Any, now: Any
) -> None:
    # 1 == 1.0 == True in Python, not in JSON: the restore must still update.
    tree = Tree.new()
    tree.apply_op({"op": "update", "id": ROOT, "data": {"v": then}}, ctx(1))
    tree.apply_op({"op": "add", "id": "a", "data": {"v": then}}, ctx(1))
    target = tree.clone()
    tree.apply_op({"op": "update", "id": "a", "data": {"v": now}}, ctx(1))
    tree.apply_op({"op": "update", "id": ROOT, "data": {"v": now}}, ctx(1))
    ops = tree.restore_ops(target)
    assert ops == [
        {"op": "update", "id": "a", "data": {"v": then}},
        {"op": "update", "id": ROOT, "data": {"v": then}},
    ]
    for op in ops:
        tree.apply_op(op, ctx(1))
    assert canonical_json(tree.view(0)) == canonical_json(target.view(0))
