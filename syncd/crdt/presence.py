"""Presence: who is here, with a little data each, for a limited time.

Each client has one record: live ``(stamp, expires_at, data)`` or left
``(stamp)``. The record with the higher stamp wins, so updates, leaves and
merges commute; stamps come from the server's hybrid clock and strictly grow
per client (:func:`next_stamp`). ``expires_at`` is absolute: whether an entry
is live is decided by the ``now_ms`` handed to :meth:`Presence.view`, never by a
clock read inside the type.

Records do not pile up: the state carries a *horizon* ``h`` and drops every
record with ``stamp + MAX_TTL_MS <= h``. Such a record has expired by then
(``expires_at <= stamp + MAX_TTL_MS``), and so has every record of that client
with a lower stamp, so dropping it changes no view at any time ``>= h``. The
server advances the horizon to its clock at most every ``PRUNE_INTERVAL_MS``
and the delta carries it, so replicas prune exactly as the server does; joins
take the max horizon, which keeps merge commutative, associative and idempotent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

from syncd.crdt.base import JSON, Base, OpContext, Step
from syncd.crdt.clock import next_stamp
from syncd.crdt.validate import (
    MAX_ELEMENT_BYTES,
    canonical_json,
    check_fields,
    int_field,
    json_object,
    op_fields,
    op_name,
)
from syncd.errors import not_restorable, not_revertible

FIELDS = {"update": op_fields("data", "ttl_ms"), "leave": op_fields()}
"""The fields of each op (docs/data-model.md#presence)."""

MIN_TTL_MS = 1_000
MAX_TTL_MS = 300_000
DEFAULT_TTL_MS = 30_000
"""``ttl_ms`` is 1000 … 300000, default 30000 (docs/data-model.md#presence)."""

PRUNE_INTERVAL_MS = 60_000
"""How often (in server time) an op also sweeps out records past the horizon:
often enough that a busy room's state stays near its live size, rarely enough
that the O(clients) sweep is noise."""

MAX_DATA_BYTES = MAX_ELEMENT_BYTES
"""``data`` as canonical JSON: 64 KiB (docs/data-model.md#presence)."""

Record = tuple[int, int | None, dict[str, Any] | None]
"""``(stamp, expires_at, data)``; a leave is ``(stamp, None, None)``."""


def _rank(record: Record) -> tuple[int, int, str]:
    # Only consulted when two different records carry the same stamp (which the
    # server never makes): a leave wins, then the later expiry, then the data.
    stamp, expires_at, data = record
    if data is None:
        return (1, 0, "")
    return (0, expires_at or 0, canonical_json(data))


def _live_data(record: Record | None, now_ms: int) -> dict[str, Any]:
    """What a bare update (a heartbeat) keeps: the entry's data while it is
    live at ``now_ms`` (the view's rule), else ``{}``. An expired record may
    or may not still be held, depending on when another writer's op last
    moved the horizon; that must not decide what the heartbeat shows."""
    if record is None:
        return {}
    _, expires_at, data = record
    if data is None or expires_at is None or expires_at <= now_ms:
        return {}
    return data


def _wins(new: Record, old: Record) -> bool:
    if new[0] != old[0]:
        return new[0] > old[0]
    return _rank(new) > _rank(old)


class Presence:
    TYPE: ClassVar[str] = "presence"
    OPS: ClassVar[Mapping[str, int]] = {"update": 0x01, "leave": 0x01}
    PREFIX: ClassVar[str] = "pr:"
    DISCONNECT_OP: ClassVar[Mapping[str, Any] | None] = {"op": "leave"}
    RESTORABLE: ClassVar[bool] = False
    """A connection that wrote an ``update`` leaves when it goes away."""
    REVERTIBLE: ClassVar[bool] = False
    REVERT_BASE: ClassVar[bool] = False

    __slots__ = ("_horizon", "_records")

    def __init__(self) -> None:
        self._records: dict[int, Record] = {}
        self._horizon = 0

    @classmethod
    def new(cls) -> Self:
        return cls()

    def apply_op(self, op: Mapping[str, Any], ctx: OpContext) -> dict[str, Any]:
        name = op_name(op, self.OPS, self.TYPE)
        check_fields(op, FIELDS[name])
        cid = ctx.client_id
        previous = self._records.get(cid)
        # Never below the horizon: a clock behind it (stepped back across a
        # restart, a node far behind the one that moved it) would stamp a
        # record that counts as pruned, and every replica would drop the op
        # it just acknowledged. Its expiry stays the server's time.
        stamp = max(
            next_stamp(ctx.now_ms, previous[0] if previous is not None else None), self._horizon
        )
        delta: dict[str, Any]
        if name == "update":
            ttl_ms = int_field(op, "ttl_ms", MIN_TTL_MS, MAX_TTL_MS, DEFAULT_TTL_MS)
            data = op.get("data")
            if data is None:
                data = _live_data(previous, ctx.now_ms)
            else:
                json_object(data, "data", MAX_DATA_BYTES)
            delta = {
                "op": "update",
                "client_id": cid,
                "stamp": stamp,
                "expires_at": ctx.now_ms + ttl_ms,
                "data": data,
            }
        else:
            delta = {"op": "leave", "client_id": cid, "stamp": stamp}
        if ctx.now_ms - self._horizon >= PRUNE_INTERVAL_MS:
            delta["horizon"] = ctx.now_ms
        self.apply_delta(delta)
        return delta

    def apply_delta(self, delta: Mapping[str, Any]) -> None:
        horizon = delta.get("horizon")
        if horizon is not None and horizon > self._horizon:
            self._horizon = horizon
            self._prune()
        stamp = delta["stamp"]
        if stamp + MAX_TTL_MS <= self._horizon:
            return
        record: Record
        if delta["op"] == "update":
            record = (stamp, delta["expires_at"], delta["data"])
        else:
            record = (stamp, None, None)
        self._offer(delta["client_id"], record)

    def _offer(self, cid: int, record: Record) -> None:
        held = self._records.get(cid)
        if held is None or _wins(record, held):
            self._records[cid] = record

    def _prune(self) -> None:
        limit = self._horizon - MAX_TTL_MS
        stale = [cid for cid, record in self._records.items() if record[0] <= limit]
        for cid in stale:
            del self._records[cid]

    def answer(self, delta: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def stamp_of(self, client_id: int) -> int | None:
        """The stamp of the record held for ``client_id`` (None: none held).
        A writer compares it with the stamp its own last op carried: higher
        means someone else wrote the entry after it (another connection of the
        same client), so the entry is no longer its to leave."""
        record = self._records.get(client_id)
        return None if record is None else record[0]

    def live_until(self) -> int:
        """When the last entry expires (0 when none is live): until then the
        CRDT stays in memory, so a disconnect still finds its entry to leave."""
        return max(
            (r[1] for r in self._records.values() if r[1] is not None and r[2] is not None),
            default=0,
        )

    def view(self, now_ms: int) -> dict[str, Any]:
        value: dict[str, Any] = {}
        expires: dict[str, int] = {}
        for cid in sorted(self._records):
            _, expires_at, data = self._records[cid]
            if data is not None and expires_at is not None and expires_at > now_ms:
                value[str(cid)] = data
                expires[str(cid)] = expires_at
        return {"value": value, "expires_at": expires}

    def state(self) -> JSON:
        clients: dict[str, Any] = {}
        for cid in sorted(self._records):
            stamp, expires_at, data = self._records[cid]
            if data is None:
                clients[str(cid)] = {"stamp": stamp, "left": True}
            else:
                clients[str(cid)] = {"stamp": stamp, "expires_at": expires_at, "data": data}
        return {"horizon": self._horizon, "clients": clients}

    @classmethod
    def from_state(cls, state: JSON) -> Self:
        new = cls()
        new._horizon = int(state["horizon"])
        for key, item in state["clients"].items():
            stamp = item["stamp"]
            if type(stamp) is not int:
                raise ValueError(f"presence record {key!r} has no integer stamp")
            if item.get("left"):
                new._records[int(key)] = (stamp, None, None)
            else:
                new._records[int(key)] = (stamp, int(item["expires_at"]), dict(item["data"]))
        new._prune()
        return new

    def merge(self, other: Self) -> None:
        for cid, record in other._records.items():
            self._offer(cid, record)
        if other._horizon > self._horizon:
            self._horizon = other._horizon
        self._prune()

    def clone(self) -> Self:
        new = type(self)()
        new._records = dict(self._records)
        new._horizon = self._horizon
        return new

    def restore_ops(self, target: Self) -> list[dict[str, Any]]:
        raise not_restorable("presence is who is here now, kept alive by its clients: not history")

    def revert_ops(self, window: Sequence[Step], base: Base | None) -> list[dict[str, Any]]:
        raise not_revertible(
            "presence is who is here now, kept alive by its clients: a writer's entry "
            "goes when it leaves or its ttl runs out, not by taking its past back"
        )
