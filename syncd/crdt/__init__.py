"""CRDT types and the engine that holds them (pure, no I/O).

``syncd.crdt.engine.Engine`` is the entry point for the rest of the service;
``syncd.crdt.types`` maps type names and id prefixes to the type classes.
"""

from syncd.crdt.base import Crdt, OpContext
from syncd.crdt.engine import (
    MAX_BATCH_OPS,
    OP_ID_MAX_LEN,
    OP_ID_WINDOW,
    PREFIXES,
    ApplyResult,
    Engine,
    Entry,
    GapError,
    Plan,
    mask_bit,
)
from syncd.crdt.types import TYPES, type_for_id

__all__ = [
    "MAX_BATCH_OPS",
    "OP_ID_MAX_LEN",
    "OP_ID_WINDOW",
    "PREFIXES",
    "TYPES",
    "ApplyResult",
    "Crdt",
    "Engine",
    "Entry",
    "GapError",
    "OpContext",
    "Plan",
    "mask_bit",
    "type_for_id",
]
