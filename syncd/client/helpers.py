"""Typed op helpers shared by the async and the sync client.

Each helper builds its op (:mod:`syncd.client.ops`) and hands it to
``apply``; the async client's ``apply`` returns a coroutine, the sync
client's the answer, so one set of helpers serves both (``R`` is the
difference). Every helper takes ``op_id`` (an idempotency key) and
``return_state`` (adds the read view after the op as ``"state"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from syncd.client import ops
from syncd.client.ops import UNSET, Op, _Unset

R = TypeVar("R")


class OpHelpers(Generic[R]):
    def apply(self, crdt_id: str, body: Op | Sequence[Op], *, return_state: bool = False) -> R:
        """POST one op or a batch (applied in order, all or none); the answer is
        ``{"ok": true, "seq", "applied", ...}`` (rga inserts add ``ids``)."""
        raise NotImplementedError

    def batch(self, crdt_id: str, batch: Sequence[Op], *, return_state: bool = False) -> R:
        if not batch:
            raise ValueError("a batch needs at least one op")
        return self.apply(crdt_id, list(batch), return_state=return_state)

    # -- counters -----------------------------------------------------------

    def gcounter_increment(
        self, crdt_id: str, amount: int = 1, *, op_id: str | None = None, return_state: bool = False
    ) -> R:
        return self.apply(
            crdt_id, ops.gcounter_increment(amount, op_id=op_id), return_state=return_state
        )

    def pncounter_increment(
        self, crdt_id: str, amount: int = 1, *, op_id: str | None = None, return_state: bool = False
    ) -> R:
        return self.apply(
            crdt_id, ops.pncounter_increment(amount, op_id=op_id), return_state=return_state
        )

    def pncounter_decrement(
        self, crdt_id: str, amount: int = 1, *, op_id: str | None = None, return_state: bool = False
    ) -> R:
        return self.apply(
            crdt_id, ops.pncounter_decrement(amount, op_id=op_id), return_state=return_state
        )

    # -- set and register ---------------------------------------------------

    def orset_add(
        self, crdt_id: str, element: Any, *, op_id: str | None = None, return_state: bool = False
    ) -> R:
        return self.apply(crdt_id, ops.orset_add(element, op_id=op_id), return_state=return_state)

    def orset_remove(
        self, crdt_id: str, element: Any, *, op_id: str | None = None, return_state: bool = False
    ) -> R:
        return self.apply(
            crdt_id, ops.orset_remove(element, op_id=op_id), return_state=return_state
        )

    def lwwregister_set(
        self,
        crdt_id: str,
        value: Any,
        *,
        timestamp: int | None = None,
        op_id: str | None = None,
        return_state: bool = False,
    ) -> R:
        return self.apply(
            crdt_id,
            ops.lwwregister_set(value, timestamp=timestamp, op_id=op_id),
            return_state=return_state,
        )

    # -- presence -----------------------------------------------------------

    def presence_update(
        self,
        crdt_id: str,
        data: dict[str, Any] | None = None,
        *,
        ttl_ms: int | None = None,
        op_id: str | None = None,
        return_state: bool = False,
    ) -> R:
        return self.apply(
            crdt_id,
            ops.presence_update(data, ttl_ms=ttl_ms, op_id=op_id),
            return_state=return_state,
        )

    def presence_leave(
        self, crdt_id: str, *, op_id: str | None = None, return_state: bool = False
    ) -> R:
        return self.apply(crdt_id, ops.presence_leave(op_id=op_id), return_state=return_state)

    # -- rga ----------------------------------------------------------------

    def rga_insert(
        self,
        crdt_id: str,
        *,
        index: int | None = None,
        after: str | _Unset | None = UNSET,
        text: str | None = None,
        values: list[Any] | None = None,
        op_id: str | None = None,
        return_state: bool = False,
    ) -> R:
        """The answer's ``ids`` are the new elements' ids, in order."""
        return self.apply(
            crdt_id,
            ops.rga_insert(index=index, after=after, text=text, values=values, op_id=op_id),
            return_state=return_state,
        )

    def rga_delete(
        self,
        crdt_id: str,
        *,
        index: int | None = None,
        count: int | None = None,
        ids: list[str] | None = None,
        op_id: str | None = None,
        return_state: bool = False,
    ) -> R:
        return self.apply(
            crdt_id,
            ops.rga_delete(index=index, count=count, ids=ids, op_id=op_id),
            return_state=return_state,
        )

    # -- tree ---------------------------------------------------------------

    def tree_add(
        self,
        crdt_id: str,
        node_id: str,
        parent: str = ops.ROOT,
        *,
        data: dict[str, Any] | None = None,
        pos: str | None = None,
        op_id: str | None = None,
        return_state: bool = False,
    ) -> R:
        return self.apply(
            crdt_id,
            ops.tree_add(node_id, parent, data=data, pos=pos, op_id=op_id),
            return_state=return_state,
        )

    def tree_move(
        self,
        crdt_id: str,
        node_id: str,
        parent: str,
        *,
        pos: str | None = None,
        op_id: str | None = None,
        return_state: bool = False,
    ) -> R:
        return self.apply(
            crdt_id, ops.tree_move(node_id, parent, pos=pos, op_id=op_id), return_state=return_state
        )

    def tree_update(
        self,
        crdt_id: str,
        node_id: str,
        data: dict[str, Any],
        *,
        op_id: str | None = None,
        return_state: bool = False,
    ) -> R:
        return self.apply(
            crdt_id, ops.tree_update(node_id, data, op_id=op_id), return_state=return_state
        )

    def tree_delete(
        self, crdt_id: str, node_id: str, *, op_id: str | None = None, return_state: bool = False
    ) -> R:
        return self.apply(crdt_id, ops.tree_delete(node_id, op_id=op_id), return_state=return_state)
