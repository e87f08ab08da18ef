"""Last-writer-wins register.

The winner is the highest ``(timestamp, client_id)``. A set without a timestamp
is stamped by the server's hybrid clock, and never below the held timestamp + 1,
so a server-stamped set always supersedes what the server holds. Two sets with
equal ``(timestamp, client_id)`` (one client reusing a timestamp) are ordered
by their values' canonical JSON, so every replica picks the same one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

from syncd.crdt.base import JSON, Base, OpContext, Step
from syncd.crdt.clock import MAX_CLOCK_SKEW_MS, next_stamp, wall_clock_ms
from syncd.crdt.validate import (
    MAX_SAFE_INTEGER,
    canonical_json,
    check_fields,
    json_value,
    op_fields,
    op_name,
    required,
    shown_json,
)
from syncd.errors import invalid_op

SET_FIELDS = op_fields("value", "timestamp")
"""The fields of ``set`` (docs/data-model.md#lwwregister)."""


class LWWRegister:
    TYPE: ClassVar[str] = "lwwregister"
    OPS: ClassVar[Mapping[str, int]] = {"set": 0x01}
    PREFIX: ClassVar[str] = "lw:"
    DISCONNECT_OP: ClassVar[Mapping[str, Any] | None] = None
    RESTORABLE: ClassVar[bool] = True
    REVERTIBLE: ClassVar[bool] = True
    REVERT_BASE: ClassVar[bool] = True

    __slots__ = ("_client_id", "_timestamp", "_value")

    def __init__(
        self, value: Any = None, timestamp: int | None = None, client_id: int | None = None
    ) -> None:
        self._value = value
        self._timestamp = timestamp
        self._client_id = client_id

    @classmethod
    def new(cls) -> Self:
        return cls()

    def apply_op(self, op: Mapping[str, Any], ctx: OpContext) -> dict[str, Any]:
        op_name(op, self.OPS, self.TYPE)
        check_fields(op, SET_FIELDS)
        value = required(op, "value")
        json_value(value, "value")
        timestamp = op.get("timestamp")
        if timestamp is None:
            timestamp = next_stamp(ctx.now_ms, self._timestamp)
        else:
            if type(timestamp) is not int or not 0 <= timestamp <= MAX_SAFE_INTEGER:
                raise invalid_op(f"timestamp: must be an integer from 0 to {MAX_SAFE_INTEGER} (ms)")
            # From the wall clock, read only here (sets a client stamps): the
            # hybrid clock (ctx.now_ms) follows other nodes' stamps up to
            # MAX_FOLLOW_AHEAD_MS past it, which added to the allowance. The
            # earlier of the two: in an engine the hybrid clock is never
            # behind the wall clock; a context made for another time (a
            # test's) keeps its own.
            if timestamp > min(ctx.now_ms, wall_clock_ms()) + MAX_CLOCK_SKEW_MS:
                raise invalid_op(
                    f"timestamp: more than {MAX_CLOCK_SKEW_MS // 1000} s ahead of the server clock"
                )
        delta = {"op": "set", "value": value, "timestamp": timestamp, "client_id": ctx.client_id}
        self._offer(value, timestamp, ctx.client_id)
        return delta

    def apply_delta(self, delta: Mapping[str, Any]) -> None:
        self._offer(delta["value"], delta["timestamp"], delta["client_id"])

    def _offer(self, value: Any, timestamp: int, client_id: int) -> None:
        if self._timestamp is not None and self._client_id is not None:
            mine = (self._timestamp, self._client_id)
            theirs = (timestamp, client_id)
            if theirs < mine:
                return
            if theirs == mine:
                new, held = canonical_json(value), canonical_json(self._value)
                # Values of one identity (1 and 1.0) are ordered as a read
                # shows them, so every replica keeps the same one of those too.
                if new < held or (new == held and shown_json(value) <= shown_json(self._value)):
                    return
        self._value = value
        self._timestamp = timestamp
        self._client_id = client_id

    def answer(self, delta: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def view(self, now_ms: int) -> dict[str, Any]:
        return {"value": self._value, "timestamp": self._timestamp, "client_id": self._client_id}

    def state(self) -> JSON:
        return {"value": self._value, "timestamp": self._timestamp, "client_id": self._client_id}

    @classmethod
    def from_state(cls, state: JSON) -> Self:
        timestamp, client_id = state["timestamp"], state["client_id"]
        if (timestamp is None) != (client_id is None):
            raise ValueError("timestamp and client_id must both be set or both be null")
        return cls(state["value"], timestamp, client_id)

    def merge(self, other: Self) -> None:
        if other._timestamp is not None and other._client_id is not None:
            self._offer(other._value, other._timestamp, other._client_id)

    def clone(self) -> Self:
        return type(self)(self._value, self._timestamp, self._client_id)

    def revert_ops(self, window: Sequence[Step], base: Base | None) -> list[dict[str, Any]]:
        """When the value now is one a marked set wrote, set the value the
        register would hold without the marked sets: the winner among the
        base's and the unmarked sets (the latest written by someone else),
        or null when there is none. Stamped now, the set wins. A value
        another writer set since (or that outranks the marked sets) stays."""
        if base is None:
            raise ValueError("a register's revert reads the base")
        start = base.crdt()
        assert isinstance(start, LWWRegister)
        without = start.clone()
        for delta, marked in window:
            if not marked:
                without.apply_delta(delta)
        return self.restore_ops(without)

    def restore_ops(self, target: Self) -> list[dict[str, Any]]:
        # A set stamped now wins over every earlier one. A register that was
        # never set reads as null: setting null gives that value back.
        # As a read shows them: 1.0 is the same identity as 1 but reads as 1.0.
        if shown_json(target._value) == shown_json(self._value):
            return []
        return [{"op": "set", "value": target._value}]
