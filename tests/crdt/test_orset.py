"""orset: add-wins semantics, element identity, limits, views."""

from __future__ import annotations

from typing import Any

import pytest

from syncd.crdt.orset import ORSet
from syncd.crdt.validate import MAX_ELEMENT_BYTES, MAX_JSON_DEPTH
from syncd.errors import ApiError
from tests.crdt.crdt_testlib import ctx


def refuse(crdt: ORSet, op: dict[str, Any], field: str) -> None:
    before = crdt.state()
    with pytest.raises(ApiError) as info:
        crdt.apply_op(op, ctx())
    assert info.value.code == "invalid_op"
    assert info.value.message.startswith(f"{field}:"), info.value.message
    assert crdt.state() == before


def test_add_and_remove_with_dots() -> None:
    s = ORSet.new()
    d1 = s.apply_op({"op": "add", "element": "x"}, ctx(3))
    assert d1 == {"op": "add", "element": "x", "dot": [3, 1], "dots": []}
    d2 = s.apply_op({"op": "add", "element": "x"}, ctx(4))
    assert d2 == {"op": "add", "element": "x", "dot": [4, 1], "dots": [[3, 1]], "form": "x"}
    d3 = s.apply_op({"op": "remove", "element": "x"}, ctx(3))
    assert d3 == {"op": "remove", "element": "x", "dots": [[4, 1]]}
    assert s.view(0) == {"value": []}
    assert s.state() == {"elements": [], "vv": {"3": 1, "4": 1}, "cloud": []}


def test_remove_of_an_absent_element_is_a_no_op() -> None:
    s = ORSet.new()
    delta = s.apply_op({"op": "remove", "element": {"a": 1}}, ctx())
    assert delta == {"op": "remove", "element": {"a": 1}, "dots": []}
    assert s.view(0) == {"value": []}


def test_identity_is_canonical_json_and_value_is_ordered_by_it() -> None:
    s = ORSet.new()
    for element in [{"b": 1, "a": 2}, "z", 10, [1], None, "é", {"a": 2, "b": 1}, 1.0]:
        s.apply_op({"op": "add", "element": element}, ctx())
    # Canonical texts: "\"z\"", "\"é\"", "10", "1.0", "[1]", "null", "{\"a\":2,\"b\":1}"
    assert s.view(0)["value"] == ["z", "é", 1.0, 10, [1], None, {"b": 1, "a": 2}]
    assert {"a": 2, "b": 1} in s
    s.apply_op({"op": "remove", "element": {"a": 2, "b": 1}}, ctx())
    assert {"b": 1, "a": 2} not in s


def test_concurrent_add_wins_over_remove() -> None:
    server = ORSet.new()
    add1 = server.apply_op({"op": "add", "element": "x"}, ctx(1))
    remove = server.apply_op({"op": "remove", "element": "x"}, ctx(2))
    add2 = server.apply_op({"op": "add", "element": "x"}, ctx(3))
    # A replica that saw the first add, then the re-add, then the old remove.
    replica = ORSet.new()
    for delta in (add1, add2, remove):
        replica.apply_delta(delta)
    assert replica.view(0) == server.view(0) == {"value": ["x"]}
    # One that gets the remove before the add it removed never shows the element.
    late = ORSet.new()
    for delta in (remove, add1):
        late.apply_delta(delta)
    assert late.view(0) == {"value": []}
    assert late.state()["vv"] == {"1": 1}


def test_element_size_limit_is_on_canonical_utf8() -> None:
    s = ORSet.new()
    fits = "é" * ((MAX_ELEMENT_BYTES - 2) // 2)  # two quotes, two bytes per character
    s.apply_op({"op": "add", "element": fits}, ctx())
    refuse(s, {"op": "add", "element": fits + "a"}, "element")
    refuse(s, {"op": "remove", "element": fits + "a"}, "element")


@pytest.mark.parametrize(
    "element",
    [
        b"bytes",
        float("nan"),
        float("inf"),
        {1: "int key"},
        (1, 2),
        2**64,
        "\ud800",
        {"k": {1, 2}},
    ],
)
def test_element_must_be_plain_json(element: Any) -> None:
    refuse(ORSet.new(), {"op": "add", "element": element}, "element")


def test_element_nesting_limit() -> None:
    ok: Any = 1
    for _ in range(MAX_JSON_DEPTH):
        ok = [ok]
    s = ORSet.new()
    s.apply_op({"op": "add", "element": ok}, ctx())
    refuse(s, {"op": "add", "element": [ok]}, "element")


def test_element_is_required_and_op_must_be_known() -> None:
    refuse(ORSet.new(), {"op": "add"}, "element")
    refuse(ORSet.new(), {"op": "insert", "element": 1}, "op")


def test_state_keeps_dots_and_the_context_with_gaps() -> None:
    server = ORSet.new()
    deltas = [server.apply_op({"op": "add", "element": i}, ctx(1)) for i in range(3)]
    replica = ORSet.new()
    replica.apply_delta(deltas[2])
    assert replica.state() == {"elements": [[2, [[1, 3]]]], "vv": {}, "cloud": [[1, 3]]}
    replica.apply_delta(deltas[0])
    replica.apply_delta(deltas[1])
    assert replica.state() == server.state()
    assert server.state()["cloud"] == []
