"""Grow-only counter: one monotonically growing count per client.

A delta carries the writer's new count, not just the amount, so applying it is
``max`` per client: idempotent and order-free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

from syncd.crdt.base import JSON, Base, OpContext, Step
from syncd.crdt.validate import MAX_AMOUNT, amount_field, check_fields, op_fields, op_name
from syncd.errors import invalid_op, not_restorable, not_revertible

INCREMENT_FIELDS = op_fields("amount")
"""The fields of an ``increment`` (docs/data-model.md#gcounter); pncounter's
ops take the same."""

MAX_COUNT = 2**63 - 1
"""One client's count must stay a signed 64-bit integer, or msgpack could not
carry the state and clients in other languages could not hold it."""


def counts_state(counts: Mapping[int, int]) -> dict[str, int]:
    """Per-client counts as a string-keyed map, ordered by client id."""
    return {str(cid): counts[cid] for cid in sorted(counts)}


def counts_from(data: Mapping[str, Any]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for key, value in data.items():
        if type(value) is not int or value < 0:
            raise ValueError(f"count for client {key!r} is not a non-negative integer")
        counts[int(key)] = value
    return counts


def grow(counts: dict[int, int], client_id: int, amount: int) -> int:
    """The client's count after adding ``amount`` (checked, not stored)."""
    count = counts.get(client_id, 0) + amount
    if count > MAX_COUNT:
        raise invalid_op(f"amount: the client's count would exceed {MAX_COUNT}")
    return count


def join_count(mine: dict[int, int], client_id: int, count: int) -> int:
    """``join_counts`` for one client, without a map per call: a replayed log
    applies one delta per record this way. Returns how much the sum grew."""
    old = mine.get(client_id, 0)
    if count <= old:
        return 0
    mine[client_id] = count
    return count - old


def join_counts(mine: dict[int, int], theirs: Mapping[int, int]) -> int:
    """Per-client max of ``theirs`` into ``mine``; returns how much the sum grew."""
    grown = 0
    for cid, count in theirs.items():
        old = mine.get(cid, 0)
        if count > old:
            mine[cid] = count
            grown += count - old
    return grown


class GCounter:
    TYPE: ClassVar[str] = "gcounter"
    OPS: ClassVar[Mapping[str, int]] = {"increment": 0x01}
    PREFIX: ClassVar[str] = "gc:"
    DISCONNECT_OP: ClassVar[Mapping[str, Any] | None] = None
    RESTORABLE: ClassVar[bool] = False
    REVERTIBLE: ClassVar[bool] = False
    REVERT_BASE: ClassVar[bool] = False

    __slots__ = ("_counts", "_total")

    def __init__(self, counts: dict[int, int] | None = None) -> None:
        self._counts: dict[int, int] = counts if counts is not None else {}
        self._total = sum(self._counts.values())

    @classmethod
    def new(cls) -> Self:
        return cls()

    def apply_op(self, op: Mapping[str, Any], ctx: OpContext) -> dict[str, Any]:
        if op.get("op") != "increment":
            op_name(op, self.OPS, self.TYPE)
        if len(op) != 2 or "amount" not in op:  # {"op", "amount"} needs no more
            check_fields(op, INCREMENT_FIELDS)
        # amount_field and grow, inline for a valid op (two calls fewer per
        # op); anything else goes through them, for their messages.
        amount = op.get("amount", 1)
        if type(amount) is not int or not 1 <= amount <= MAX_AMOUNT:
            amount = amount_field(op)
        cid = ctx.client_id
        counts = self._counts
        count = counts.get(cid, 0) + amount
        if count > MAX_COUNT:
            grow(counts, cid, amount)  # raises
        counts[cid] = count
        self._total += amount
        return {"op": "increment", "client_id": cid, "amount": amount, "count": count}

    def apply_delta(self, delta: Mapping[str, Any]) -> None:
        self._total += join_count(self._counts, delta["client_id"], delta["count"])

    def answer(self, delta: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def view(self, now_ms: int) -> dict[str, Any]:
        return {"value": self._total, "counts": counts_state(self._counts)}

    def state(self) -> JSON:
        return {"counts": counts_state(self._counts)}

    @classmethod
    def from_state(cls, state: JSON) -> Self:
        return cls(counts_from(state["counts"]))

    def merge(self, other: Self) -> None:
        self._total += join_counts(self._counts, other._counts)

    def clone(self) -> Self:
        return type(self)(dict(self._counts))

    def restore_ops(self, target: Self) -> list[dict[str, Any]]:
        raise not_restorable("a grow-only counter only goes up: no op of it takes it back")

    def revert_ops(self, window: Sequence[Step], base: Base | None) -> list[dict[str, Any]]:
        raise not_revertible(
            "a grow-only counter only goes up: no op of it takes a writer's increments back "
            "(use a pncounter for a count that must be revertible)"
        )

    @property
    def total(self) -> int:
        return self._total
