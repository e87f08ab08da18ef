"""Shared op-field checks and the hybrid clock."""

from __future__ import annotations

from typing import Any

import pytest

from syncd.crdt.clock import MAX_FOLLOW_AHEAD_MS, HybridClock, next_stamp
from syncd.crdt.validate import (
    MAX_JSON_DEPTH,
    canonical_json,
    int_field,
    json_object,
    json_value,
    op_name,
    required,
    str_field,
)
from syncd.errors import ApiError


def message(fn: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(ApiError) as info:
        fn(*args, **kwargs)
    assert (info.value.status, info.value.code) == (400, "invalid_op")
    return info.value.message


def test_canonical_json_sorts_keys_without_spaces_or_escapes() -> None:
    assert (
        canonical_json({"b": [1, {"d": 1, "c": "é"}], "a": None})
        == '{"a":null,"b":[1,{"c":"é","d":1}]}'
    )


def test_json_value_accepts_plain_json_and_returns_canonical_text() -> None:
    assert json_value({"z": 1.5, "a": [True, None, "x"]}, "f") == '{"a":[true,null,"x"],"z":1.5}'
    assert json_value(2**64 - 1, "f") == str(2**64 - 1)
    assert json_value(-(2**63), "f") == str(-(2**63))


@pytest.mark.parametrize(
    "value",
    [
        b"x",
        bytearray(b"x"),
        (1,),
        {1},
        {1: 2},
        {None: 1},
        float("nan"),
        float("-inf"),
        2**64,
        -(2**63) - 1,
        "\udc80",
        {"k": ["\ud800"]},
        object(),
    ],
)
def test_json_value_refuses_what_json_or_msgpack_cannot_carry(value: Any) -> None:
    assert message(json_value, value, "element").startswith("element:")


def test_json_depth_limit_is_exact() -> None:
    value: Any = "leaf"
    for _ in range(MAX_JSON_DEPTH):
        value = {"k": value}
    json_value(value, "f")
    assert message(json_value, [value], "f").startswith("f: nested deeper")
    very_deep: Any = []
    for _ in range(100_000):
        very_deep = [very_deep]
    assert message(json_value, very_deep, "f").startswith("f:")


def test_size_limit_counts_utf8_bytes_of_canonical_json() -> None:
    json_value("éé", "f", max_bytes=6)  # two quotes and two 2-byte characters
    assert "larger than 5 bytes" in message(json_value, "éé", "f", max_bytes=5)
    assert message(json_object, [1], "data").startswith("data: must be a JSON object")
    json_object({}, "data")


def test_field_helpers() -> None:
    assert int_field({}, "n", 1, 5, 3) == 3
    assert int_field({"n": 5}, "n", 1, 5, 3) == 5
    assert message(int_field, {}, "n", 1, 5, None) == "n: required"
    for bad in (0, 6, True, 2.0, "3"):
        assert message(int_field, {"n": bad}, "n", 1, 5, 3).startswith("n: must be an integer")
    assert str_field({"s": "abc"}, "s", 3) == "abc"
    assert str_field({}, "s", 3, required=False) is None
    assert message(str_field, {}, "s", 3) == "s: required"
    for bad_str in ("", "abcd", 5, ["a"]):
        assert message(str_field, {"s": bad_str}, "s", 3).startswith("s: must be a string")
    assert message(str_field, {"s": "\ud800"}, "s", 3).startswith("s: not encodable")
    assert op_name({"op": "add"}, {"add": 1}, "orset") == "add"
    assert (
        message(op_name, {"op": "nope"}, {"add": 1, "remove": 2}, "orset")
        == "op: must be one of add, remove for orset"
    )
    assert required({"v": None}, "v") is None
    assert message(required, {}, "v") == "v: required"


def test_hybrid_clock_never_goes_back() -> None:
    wall = [1000]
    clock = HybridClock(lambda: wall[0])
    assert clock.now() == 1000
    wall[0] = 900
    assert clock.now() == 1000
    wall[0] = 1200
    assert clock.now() == 1200


def test_hybrid_clock_follows_remote_stamps_within_bounds() -> None:
    wall = [1000]
    clock = HybridClock(lambda: wall[0])
    clock.observe(5000)
    assert clock.now() == 5000
    clock.observe(10**12)
    assert clock.now() == 1000 + MAX_FOLLOW_AHEAD_MS
    clock.observe(3)
    assert clock.last == 1000 + MAX_FOLLOW_AHEAD_MS


def test_next_stamp_is_strictly_after_the_previous() -> None:
    assert next_stamp(10, None) == 10
    assert next_stamp(10, 5) == 10
    assert next_stamp(10, 10) == 11
    assert next_stamp(10, 50) == 51
