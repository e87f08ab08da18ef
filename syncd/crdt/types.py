"""The registry of CRDT types: names, id prefixes and op-mask bits (docs/data-model.md#types).

A new type is a module with one class that satisfies ``syncd.crdt.base.Crdt``
(its name, id prefix, ops and their mask bits are class attributes) and one
entry in ``_classes`` below; everything else (routing by prefix, permission
masks, snapshots, the engine) follows from the class.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from syncd.crdt.base import Crdt
from syncd.crdt.gcounter import GCounter
from syncd.crdt.lwwregister import LWWRegister
from syncd.crdt.orset import ORSet
from syncd.crdt.pncounter import PNCounter
from syncd.crdt.presence import Presence
from syncd.crdt.rga import Rga
from syncd.crdt.tree import Tree
from syncd.crdt.ydoc import YDoc
from syncd.errors import ApiError, invalid_op, unknown_type

_classes: list[type[Crdt]] = [GCounter, PNCounter, ORSet, LWWRegister, Presence, Rga, Tree, YDoc]

TYPES: Mapping[str, type[Crdt]] = {cls.TYPE: cls for cls in _classes}
"""Type name -> class."""

PREFIXES: Mapping[str, str] = {cls.PREFIX: cls.TYPE for cls in _classes}
"""CRDT id prefix -> the type it fixes."""

if len(TYPES) != len(_classes) or len(PREFIXES) != len(_classes):
    raise RuntimeError("two CRDT types share a name or an id prefix")


def type_for_id(crdt_id: str) -> str | None:
    """The type an id's prefix fixes, or None for an id without a known prefix."""
    return PREFIXES.get(crdt_id[:3])


def with_type_list(exc: ApiError) -> ApiError:
    """``exc``, with the valid types and id prefixes added when it is
    ``unknown_type`` (the engine's message says only what was wrong)."""
    if exc.code != "unknown_type":
        return exc
    prefixes = ", ".join(f"{prefix} ({name})" for prefix, name in PREFIXES.items())
    return ApiError(
        exc.status,
        exc.code,
        f"{exc.message}; the types are {', '.join(TYPES)}, and the id prefixes {prefixes}",
        exc.headers,
        exc.extra,
    )


def check_ops_named(crdt_id: str, body: Any) -> None:
    """400 ``invalid_op`` for an op without its ``op`` field, saying that it is
    missing (the engine would call it an op name it does not know). Bodies of
    another shape are left to the engine."""
    if type(body) is dict:
        if "op" not in body:
            raise invalid_op(_missing_op(crdt_id, ""))
    elif type(body) is list:
        for i, op in enumerate(body):
            if type(op) is dict and "op" not in op:
                raise invalid_op(_missing_op(crdt_id, f"ops[{i}]."))


def _missing_op(crdt_id: str, where: str) -> str:
    type_name = type_for_id(crdt_id)
    if type_name is None:
        return f"{where}op: missing; every op names what it does in 'op'"
    names = ", ".join(sorted(TYPES[type_name].OPS))
    return f"{where}op: missing; every op names what it does in 'op' (a {type_name}: {names})"


def crdt_class(type_name: str) -> type[Crdt]:
    cls = TYPES.get(type_name)
    if cls is None:
        raise unknown_type(f"type: unknown CRDT type {type_name!r}")
    return cls


def mask_bit(type_name: str, op_name: str) -> int:
    """The op-mask bit of ``op_name`` on ``type_name`` (docs/data-model.md#types)."""
    bit = crdt_class(type_name).OPS.get(op_name)
    if bit is None:
        raise invalid_op(f"op: {op_name!r} is not an op of {type_name}")
    return bit
