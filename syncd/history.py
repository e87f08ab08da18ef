"""A CRDT's past: its retained ops, its state at a seq, and restoring that state.

The store keeps the records and checkpoints (``store/history.py`` says what
and for how long); this module turns them into answers:

- :meth:`HistoryService.page`: retained ops, newest first, with a cursor,
  optionally only one writer's (a client id, an origin: :class:`Writer`);
- :meth:`HistoryService.state_at`: the newest checkpoint at or before the seq
  (never the beginning when a later one is retained) plus the op records
  after it, applied as deltas to a fresh replica of the type;
- :meth:`HistoryService.restore`: the ordinary ops that take the current
  state to that one (``Crdt.restore_ops``), applied through the service like
  any client's ops: durable, replicated, broadcast, webhooks, and merged
  with concurrent edits as CRDT ops are. With an ``op_id`` the ops carry
  ``<op_id>/<i>``, so a repeated restore answers as the first did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from syncd.crdt.base import Base
from syncd.crdt.engine import MAX_BATCH_OPS
from syncd.crdt.types import crdt_class
from syncd.errors import bad_request, not_found, not_restorable

if TYPE_CHECKING:
    from syncd.auth.authenticator import Principal
    from syncd.crdt.base import Crdt
    from syncd.crdt.engine import Engine, Entry
    from syncd.service import CrdtService
    from syncd.store.base import Record, Store

MAX_HISTORY_LIMIT: Final = 1000
"""Ops in one page of ``/history``: about what one answer of a few hundred KB holds."""

DEFAULT_HISTORY_LIMIT: Final = 100

MAX_HISTORY_SCAN: Final = 10_000
"""Retained records one filtered page (``?client_id=``, ``?origin=``) looks
at, at most: a writer with few ops in a long history would otherwise make one
request read all of it. A page that stops there has fewer ops than asked
and a ``next`` to go on from (a few ms of reading per page)."""


@dataclass(frozen=True, slots=True)
class Writer:
    """Whose ops: a client id, an origin, or both (both must match)."""

    client_id: int | None = None
    origin: str | None = None

    def matches(self, record: Record) -> bool:
        return (self.client_id is None or record["client_id"] == self.client_id) and (
            self.origin is None or record.get("origin") == self.origin
        )

    def body(self) -> dict[str, Any]:
        """As JSON fields (absent ones left out)."""
        out: dict[str, Any] = {}
        if self.client_id is not None:
            out["client_id"] = self.client_id
        if self.origin is not None:
            out["origin"] = self.origin
        return out


def history_item(record: Record) -> dict[str, Any]:
    """One op of a ``/history`` page: seq, writer, time, delta, and the
    op_id, origin and revert mark when it has them."""
    item = {
        "seq": record["seq"],
        "client_id": record["client_id"],
        "ts": record["ts"],
        "op": record["op"],
    }
    for key in ("op_id", "origin", "reverts"):
        value = record.get(key)
        if value is not None:
            item[key] = value
    return item


class HistoryService:
    def __init__(self, *, engine: Engine, store: Store, service: CrdtService) -> None:
        self._engine = engine
        self._store = store
        self._service = service

    async def _entry(self, ns: str, crdt_id: str) -> Entry:
        entry = await self._service.ensure(ns, crdt_id)
        if entry is None:
            raise not_found(f"no CRDT {crdt_id!r} in namespace {ns!r}")
        return entry

    async def type_of(self, ns: str, crdt_id: str) -> str:
        return (await self._entry(ns, crdt_id)).type

    async def page(
        self,
        ns: str,
        crdt_id: str,
        before: int | None,
        limit: int,
        writer: Writer | None = None,
    ) -> dict[str, Any]:
        """Retained ops below ``before``, newest first, at most ``limit``;
        with ``writer``, only that writer's (see :meth:`_filtered`)."""
        entry = await self._entry(ns, crdt_id)
        epoch, latest = entry.epoch, entry.seq
        if writer is None:
            records, oldest = await self._store.history(ns, crdt_id, epoch, latest, before, limit)
            last = records[-1]["seq"] if records else None
            more = len(records) == limit and last is not None and last > oldest + 1
        else:
            records, oldest, last, more = await self._filtered(
                ns, crdt_id, epoch, latest, before, limit, writer
            )
        ops = [history_item(record) for record in records]
        return {
            "id": crdt_id,
            "type": entry.type,
            "epoch": epoch,
            "seq": latest,
            "oldest": oldest,
            "ops": ops,
            "next": last if more else None,
        }

    async def _filtered(
        self,
        ns: str,
        crdt_id: str,
        epoch: str,
        latest: int,
        before: int | None,
        limit: int,
        writer: Writer,
    ) -> tuple[list[Record], int, int | None, bool]:
        """The matching records below ``before``, newest first: read a page
        at a time until ``limit`` match or :data:`MAX_HISTORY_SCAN` records
        were looked at. Also the oldest rebuildable seq, the seq the scan got
        down to (the next page's ``before``) and whether older records remain."""
        found: list[Record] = []
        scanned = 0
        cursor = before
        oldest = 0
        while True:
            want = min(MAX_HISTORY_LIMIT, MAX_HISTORY_SCAN - scanned)
            records, oldest = await self._store.history(ns, crdt_id, epoch, latest, cursor, want)
            for record in records:
                scanned += 1
                cursor = record["seq"]
                if writer.matches(record):
                    found.append(record)
                    if len(found) == limit:
                        return found, oldest, cursor, cursor > oldest + 1
            if len(records) < want or (cursor is not None and cursor <= oldest + 1):
                return found, oldest, cursor, False
            if scanned >= MAX_HISTORY_SCAN:
                # The bound: answer what was found, with where to go on from.
                return found, oldest, cursor, True

    async def state_at(self, ns: str, crdt_id: str, seq: int) -> tuple[Entry, Crdt]:
        """The CRDT right after op ``seq`` of its current life (a new object)."""
        entry = await self._entry(ns, crdt_id)
        if seq > entry.seq:
            raise bad_request(f"at: seq {seq} is in the future (the CRDT is at seq {entry.seq})")
        if seq == entry.seq:
            return entry, entry.crdt.clone()
        _, base = await self.base_at(ns, crdt_id, seq)
        return entry, base.crdt()

    async def base_at(self, ns: str, crdt_id: str, seq: int) -> tuple[Entry, Base]:
        """What rebuilds the CRDT right after op ``seq`` (at most its current
        seq), unbuilt: the newest retained checkpoint at or before it and the
        deltas after it. 410 ``history_expired`` when ``seq`` is older than
        retained."""
        entry = await self._entry(ns, crdt_id)
        checkpoint, records = await self._store.history_base(
            ns, crdt_id, entry.epoch, entry.seq, min(seq, entry.seq)
        )
        state = checkpoint["state"] if checkpoint is not None else None
        return entry, Base(crdt_class(entry.type), state, [record["op"] for record in records])

    async def read_at(self, ns: str, crdt_id: str, seq: int, *, full: bool) -> dict[str, Any]:
        """The read answer as it was right after op ``seq``."""
        entry, crdt = await self.state_at(ns, crdt_id, seq)
        head: dict[str, Any] = {"id": crdt_id, "type": entry.type, "seq": seq, "epoch": entry.epoch}
        if full:
            head["state"] = crdt.state()
        else:
            head.update(crdt.view(self._engine.now_ms()))
        return head

    async def restore(
        self,
        ns: str,
        crdt_id: str,
        seq: int,
        principal: Principal,
        op_id: str | None,
        source: str,
    ) -> dict[str, Any]:
        """Apply the ops that make the current state equal the state at ``seq``."""
        entry = await self._entry(ns, crdt_id)
        cls = crdt_class(entry.type)
        if not cls.RESTORABLE:
            entry.crdt.restore_ops(entry.crdt)  # raises with the type's reason
            raise not_restorable(f"{entry.type} cannot be restored")
        if op_id is not None:
            seen = entry.op_ids.get(f"{op_id}/0")
            if seen is not None:
                return {"ok": True, "seq": seen[0], "restored": seq, "duplicate": True}
        _, target = await self.state_at(ns, crdt_id, seq)
        entry = await self._entry(ns, crdt_id)  # the current one, after the wait
        ops = entry.crdt.restore_ops(target)
        if not ops:
            return {"ok": True, "seq": entry.seq, "applied": 0, "restored": seq}
        if op_id is not None:
            ops = [{**op, "op_id": f"{op_id}/{i}"} for i, op in enumerate(ops)]
        applied = 0
        last = entry.seq
        for start in range(0, len(ops), MAX_BATCH_OPS):
            result = await self._service.apply_ops(
                ns, crdt_id, ops[start : start + MAX_BATCH_OPS], principal, source
            )
            applied += result.applied
            last = result.seq
        return {"ok": True, "seq": last, "applied": applied, "restored": seq}
