"""The registry of CRDT types: names, id prefixes and op-mask bits (docs/data-model.md#types).

A new type is a module with one class that satisfies ``syncd.crdt.base.Crdt``
(its name, id prefix, ops and their mask bits are class attributes) and one
entry in ``_classes`` below; everything else (routing by prefix, permission
masks, snapshots, the engine) follows from the class.
"""

from __future__ import annotations

from collections.abc import Mapping

from syncd.crdt.base import Crdt
from syncd.crdt.gcounter import GCounter
from syncd.crdt.lwwregister import LWWRegister
from syncd.crdt.orset import ORSet
from syncd.crdt.pncounter import PNCounter
from syncd.crdt.presence import Presence
from syncd.crdt.rga import Rga
from syncd.crdt.tree import Tree
from syncd.crdt.ydoc import YDoc
from syncd.errors import invalid_op, unknown_type

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
