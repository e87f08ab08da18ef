"""Positive-negative counter: two grow-only per-client maps, ``p`` and ``n``.

The value is ``sum(p) - sum(n)``. A delta carries the writer's new count in the
map it grew, so applying it is ``max``: idempotent and order-free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

from syncd.crdt.base import JSON, Base, OpContext, Step
from syncd.crdt.gcounter import (
    INCREMENT_FIELDS,
    counts_from,
    counts_state,
    grow,
    join_count,
    join_counts,
)
from syncd.crdt.validate import MAX_AMOUNT, amount_field, check_fields, op_name


class PNCounter:
    TYPE: ClassVar[str] = "pncounter"
    OPS: ClassVar[Mapping[str, int]] = {"increment": 0x01, "decrement": 0x02}
    PREFIX: ClassVar[str] = "pn:"
    DISCONNECT_OP: ClassVar[Mapping[str, Any] | None] = None
    RESTORABLE: ClassVar[bool] = True
    REVERTIBLE: ClassVar[bool] = True
    REVERT_BASE: ClassVar[bool] = False

    __slots__ = ("_n", "_p", "_value")

    def __init__(self, p: dict[int, int] | None = None, n: dict[int, int] | None = None) -> None:
        self._p: dict[int, int] = p if p is not None else {}
        self._n: dict[int, int] = n if n is not None else {}
        self._value = sum(self._p.values()) - sum(self._n.values())

    @classmethod
    def new(cls) -> Self:
        return cls()

    def apply_op(self, op: Mapping[str, Any], ctx: OpContext) -> dict[str, Any]:
        name = op_name(op, self.OPS, self.TYPE)
        if len(op) != 2 or "amount" not in op:  # {"op", "amount"} needs no more
            check_fields(op, INCREMENT_FIELDS)  # decrement takes the same
        amount = amount_field(op)
        cid = ctx.client_id
        if name == "increment":
            count = grow(self._p, cid, amount)
            self._p[cid] = count
            self._value += amount
        else:
            count = grow(self._n, cid, amount)
            self._n[cid] = count
            self._value -= amount
        return {"op": name, "client_id": cid, "amount": amount, "count": count}

    def apply_delta(self, delta: Mapping[str, Any]) -> None:
        if delta["op"] == "increment":
            self._value += join_count(self._p, delta["client_id"], delta["count"])
        else:
            self._value -= join_count(self._n, delta["client_id"], delta["count"])

    def answer(self, delta: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def view(self, now_ms: int) -> dict[str, Any]:
        return {"value": self._value, "p": counts_state(self._p), "n": counts_state(self._n)}

    def state(self) -> JSON:
        return {"p": counts_state(self._p), "n": counts_state(self._n)}

    @classmethod
    def from_state(cls, state: JSON) -> Self:
        return cls(counts_from(state["p"]), counts_from(state["n"]))

    def merge(self, other: Self) -> None:
        self._value += join_counts(self._p, other._p)
        self._value -= join_counts(self._n, other._n)

    def clone(self) -> Self:
        return type(self)(dict(self._p), dict(self._n))

    def restore_ops(self, target: Self) -> list[dict[str, Any]]:
        return _moves(target._value - self._value)

    def revert_ops(self, window: Sequence[Step], base: Base | None) -> list[dict[str, Any]]:
        """The opposite of the marked ops' net amount: every increment and
        decrement stays in effect for good (the counts only grow), so all of
        them are taken back, whatever came after."""
        net = 0
        for delta, marked in window:
            if marked:
                net += delta["amount"] if delta["op"] == "increment" else -delta["amount"]
        return _moves(-net)


def _moves(diff: int) -> list[dict[str, Any]]:
    """Ops that change the value by ``diff``: one unless it is past an op's largest amount."""
    name = "increment" if diff > 0 else "decrement"
    ops: list[dict[str, Any]] = []
    left = abs(diff)
    while left:
        amount = min(left, MAX_AMOUNT)
        ops.append({"op": name, "amount": amount})
        left -= amount
    return ops
