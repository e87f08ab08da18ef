"""An op carries the common fields and its own, nothing else: an unknown field
is 400 ``invalid_op`` naming it, and every field the API document lists for
an op is accepted (the document and the types agree)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from syncd.crdt.base import OpContext
from syncd.crdt.types import TYPES
from syncd.crdt.validate import COMMON_FIELDS, check_fields, op_fields
from syncd.errors import ApiError

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = json.loads((ROOT / "syncd" / "openapi.json").read_text())["components"]["schemas"]
GROUPS = {
    "gcounter": "GCounterOp",
    "pncounter": "PNCounterOp",
    "orset": "ORSetOp",
    "lwwregister": "LWWRegisterOp",
    "presence": "PresenceOp",
    "rga": "RgaOp",
    "tree": "TreeOp",
    "ydoc": "YDocOp",
}


def documented() -> list[tuple[str, str, frozenset[str]]]:
    """(type, op, the fields the API document lists for it)."""
    out = []
    for type_name, group in GROUPS.items():
        for alt in SCHEMAS[group]["oneOf"]:
            schema = SCHEMAS[alt["$ref"].rsplit("/", 1)[1]]
            out.append(
                (type_name, schema["properties"]["op"]["const"], frozenset(schema["properties"]))
            )
    return out


OPS = documented()


def test_every_type_and_op_is_documented() -> None:
    assert {t for t, _, _ in OPS} == set(TYPES)
    for type_name, cls in TYPES.items():
        assert {name for t, name, _ in OPS if t == type_name} == set(cls.OPS)


def apply(type_name: str, op: dict[str, Any]) -> None:
    crdt = TYPES[type_name].new()
    crdt.apply_op(op, OpContext(7, time.time_ns() // 1_000_000, 1))


def refusal(type_name: str, op: dict[str, Any]) -> str | None:
    try:
        apply(type_name, op)
    except ApiError as exc:
        return exc.message
    return None


@pytest.mark.parametrize(("type_name", "name", "fields"), OPS)
def test_an_unknown_field_is_refused_by_name(
    type_name: str, name: str, fields: frozenset[str]
) -> None:
    assert fields >= COMMON_FIELDS
    for bogus in ("amout", "elemnt", "ttl", "nonsense"):
        if bogus in fields:
            continue
        with pytest.raises(ApiError) as info:
            apply(type_name, {"op": name, bogus: 1})
        assert (info.value.status, info.value.code) == (400, "invalid_op")
        assert info.value.message.startswith(f"{bogus}: unknown field"), info.value.message


@pytest.mark.parametrize(("type_name", "name", "fields"), OPS)
def test_every_documented_field_is_accepted(
    type_name: str, name: str, fields: frozenset[str]
) -> None:
    """Each field the document lists, alone with ``op``, is never refused as
    unknown (it may be refused for its value, or for a field it needs)."""
    for field in fields:
        message = refusal(type_name, {"op": name, field: None})
        assert message is None or "unknown field" not in message, (field, message)


def test_the_common_fields_ride_on_a_real_op() -> None:
    op = {
        "op": "increment",
        "amount": 2,
        "type": "gcounter",
        "op_id": "a",
        "client_id": 7,
        "origin": "agent:x",
    }
    assert refusal("gcounter", op) is None
    assert refusal("lwwregister", {"op": "set", "value": 1, "timestamp": 5}) is None
    # A field of another op of the same type is not one of this op's.
    message = refusal("tree", {"op": "delete", "id": "x", "data": {}})
    assert message is not None and message.startswith("data: unknown field")
    message = refusal("presence", {"op": "leave", "ttl_ms": 1000})
    assert message == (
        "ttl_ms: unknown field; leave takes no field of its own besides "
        "client_id, op, op_id, origin, type"
    )


def test_the_message_names_the_op_and_its_fields() -> None:
    with pytest.raises(ApiError) as info:
        check_fields({"op": "increment", "amout": 2}, op_fields("amount"))
    assert info.value.message == (
        "amout: unknown field; increment takes amount besides client_id, op, op_id, origin, type"
    )
    check_fields({"op": "increment", "amount": 2}, op_fields("amount"))
