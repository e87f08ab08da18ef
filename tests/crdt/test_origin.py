"""Attribution in the engine: an op's ``origin`` is kept in its record (and
only when given), checked like every op field, and a batch's origin reaches
every op of the batch that names none of its own."""

from __future__ import annotations

from typing import Any

import pytest

from syncd.crdt.engine import Engine
from syncd.crdt.validate import ORIGIN_MAX_LEN, check_origin, with_origin
from syncd.errors import ApiError


def apply(engine: Engine, body: Any, crdt_id: str = "pn:c", client_id: int = 7) -> Any:
    return engine.apply(engine.plan("ns", crdt_id, body), client_id)


def test_the_record_keeps_the_origin_and_only_when_given() -> None:
    engine = Engine()
    with_origin_ = apply(engine, {"op": "increment", "origin": "agent:summarize-42"})
    assert with_origin_.records[0]["origin"] == "agent:summarize-42"
    plain = apply(engine, {"op": "increment"})
    assert "origin" not in plain.records[0]
    null = apply(engine, {"op": "increment", "origin": None})
    assert "origin" not in null.records[0]
    # The delta (what replicas apply) does not carry it: it is the record's.
    assert "origin" not in with_origin_.records[0]["op"]


def test_each_op_of_a_batch_keeps_its_own() -> None:
    engine = Engine()
    result = apply(
        engine,
        [
            {"op": "insert", "index": 0, "text": "ab", "origin": "a"},
            {"op": "insert", "index": 2, "text": "c"},
            {"op": "delete", "index": 0, "origin": "b"},
        ],
        crdt_id="rg:t",
    )
    assert [r.get("origin") for r in result.records] == ["a", None, "b"]
    assert engine.read("ns", "rg:t")["text"] == "bc"  # type: ignore[index]


@pytest.mark.parametrize(
    ("origin", "why"),
    [
        ("", "1 to 128"),
        ("x" * (ORIGIN_MAX_LEN + 1), "1 to 128"),
        (5, "1 to 128"),
        (["a"], "1 to 128"),
        ("\ud800", "UTF-8"),
    ],
)
def test_a_bad_origin_is_400_naming_the_field(origin: Any, why: str) -> None:
    engine = Engine()
    with pytest.raises(ApiError) as info:
        apply(engine, {"op": "increment", "origin": origin})
    assert (info.value.status, info.value.code) == (400, "invalid_op")
    assert info.value.message.startswith("origin:") and why in info.value.message
    with pytest.raises(ApiError) as info:
        apply(engine, [{"op": "increment"}, {"op": "increment", "origin": origin}])
    assert info.value.message.startswith("ops[1].origin:")
    assert engine.get("ns", "pn:c") is None  # nothing applied


def test_the_longest_origin_is_kept_whole() -> None:
    engine = Engine()
    longest = "é" * ORIGIN_MAX_LEN
    assert apply(engine, {"op": "increment", "origin": longest}).records[0]["origin"] == longest


def test_a_batch_origin_goes_to_the_ops_without_one() -> None:
    body = [
        {"op": "increment"},
        {"op": "increment", "origin": "own"},
        {"op": "increment", "origin": None},
    ]
    stamped = with_origin(body, "batch")
    assert [op.get("origin") for op in stamped] == ["batch", "own", "batch"]
    assert body[0] == {"op": "increment"}  # the caller's body is not changed
    assert with_origin({"op": "increment"}, "one") == {"op": "increment", "origin": "one"}
    assert with_origin("not ops", "x") == "not ops"  # left for the engine to refuse
    assert check_origin("agent:x") == "agent:x"


def test_replayed_records_with_an_origin_apply() -> None:
    source, replica = Engine(), Engine()
    result = apply(source, {"op": "insert", "index": 0, "text": "hi", "origin": "o"}, "rg:t")
    for record in result.records:
        assert replica.replay(record)
    assert replica.read("ns", "rg:t")["text"] == "hi"  # type: ignore[index]
