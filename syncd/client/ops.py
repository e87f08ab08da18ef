"""Op builders: one function per op of every type (docs/data-model.md#ops), no I/O.

Each returns the op map the service takes, with its ``type`` named so the op
also works on ids without a type prefix, and ``op_id`` (an idempotency key for
safe retries) when given. Batches are lists of these maps.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Final

Op = dict[str, Any]

ROOT: Final = "root"
"""The tree's implicit root node."""


class _Unset(Enum):
    UNSET = 0


UNSET: Final = _Unset.UNSET
"""Marks an argument as not given where ``None`` is a meaningful value
(``rga_insert(after=None)`` inserts at the head)."""


def _op(type_name: str, name: str, op_id: str | None, **fields: Any) -> Op:
    op: Op = {"op": name, "type": type_name}
    op.update({key: value for key, value in fields.items() if value is not UNSET})
    if op_id is not None:
        op["op_id"] = op_id
    return op


def gcounter_increment(amount: int = 1, *, op_id: str | None = None) -> Op:
    return _op("gcounter", "increment", op_id, amount=amount)


def pncounter_increment(amount: int = 1, *, op_id: str | None = None) -> Op:
    return _op("pncounter", "increment", op_id, amount=amount)


def pncounter_decrement(amount: int = 1, *, op_id: str | None = None) -> Op:
    return _op("pncounter", "decrement", op_id, amount=amount)


def orset_add(element: Any, *, op_id: str | None = None) -> Op:
    return _op("orset", "add", op_id, element=element)


def orset_remove(element: Any, *, op_id: str | None = None) -> Op:
    return _op("orset", "remove", op_id, element=element)


def lwwregister_set(value: Any, *, timestamp: int | None = None, op_id: str | None = None) -> Op:
    """``timestamp`` in ms; by default the service's clock decides."""
    return _op(
        "lwwregister",
        "set",
        op_id,
        value=value,
        timestamp=UNSET if timestamp is None else timestamp,
    )


def presence_update(
    data: dict[str, Any] | None = None, *, ttl_ms: int | None = None, op_id: str | None = None
) -> Op:
    """Without ``data`` a heartbeat: the entry lives on with the data it has."""
    return _op(
        "presence",
        "update",
        op_id,
        data=UNSET if data is None else data,
        ttl_ms=UNSET if ttl_ms is None else ttl_ms,
    )


def presence_leave(*, op_id: str | None = None) -> Op:
    return _op("presence", "leave", op_id)


def rga_insert(
    *,
    index: int | None = None,
    after: str | _Unset | None = UNSET,
    text: str | None = None,
    values: list[Any] | None = None,
    op_id: str | None = None,
) -> Op:
    """Insert before the element now at ``index``, or after the element id
    ``after`` (``None``: at the head); ``text`` (one element per character) or
    ``values``. ValueError unless exactly one of each pair is given."""
    if (index is None) == (after is UNSET):
        raise ValueError("rga_insert takes exactly one of index or after")
    if (text is None) == (values is None):
        raise ValueError("rga_insert takes exactly one of text or values")
    return _op(
        "rga",
        "insert",
        op_id,
        index=UNSET if index is None else index,
        after=after,
        text=UNSET if text is None else text,
        values=UNSET if values is None else values,
    )


def rga_delete(
    *,
    index: int | None = None,
    count: int | None = None,
    ids: list[str] | None = None,
    op_id: str | None = None,
) -> Op:
    """Delete ``count`` (default 1) elements from ``index``, or the element ``ids``."""
    if (index is None) == (ids is None):
        raise ValueError("rga_delete takes exactly one of index or ids")
    if ids is not None and count is not None:
        raise ValueError("rga_delete: count goes with index, not with ids")
    return _op(
        "rga",
        "delete",
        op_id,
        index=UNSET if index is None else index,
        count=UNSET if count is None else count,
        ids=UNSET if ids is None else ids,
    )


def tree_add(
    node_id: str,
    parent: str = ROOT,
    *,
    data: dict[str, Any] | None = None,
    pos: str | None = None,
    op_id: str | None = None,
) -> Op:
    return _op(
        "tree",
        "add",
        op_id,
        id=node_id,
        parent=parent,
        data=UNSET if data is None else data,
        pos=UNSET if pos is None else pos,
    )


def tree_move(node_id: str, parent: str, *, pos: str | None = None, op_id: str | None = None) -> Op:
    return _op("tree", "move", op_id, id=node_id, parent=parent, pos=UNSET if pos is None else pos)


def tree_update(node_id: str, data: dict[str, Any], *, op_id: str | None = None) -> Op:
    return _op("tree", "update", op_id, id=node_id, data=data)


def tree_delete(node_id: str, *, op_id: str | None = None) -> Op:
    return _op("tree", "delete", op_id, id=node_id)
