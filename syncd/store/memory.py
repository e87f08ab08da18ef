"""MemoryStore: the Store protocol without a disk, for fast tests of the layers above.

It keeps the last snapshot's entries and the records after it, so a test can
"restart" by calling ``reload()`` (or handing ``recovered()`` to a fresh
engine). ``fail_writes`` makes appends raise ``StoreUnavailable`` (503) and
turns ``ready`` off, the way a full disk does on a FileStore, and calls
``on_failure`` as it does.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Sequence
from typing import Any

from syncd.errors import StoreUnavailable
from syncd.store.base import (
    AppliedT,
    EntrySource,
    Listed,
    Loaded,
    Record,
    Recovered,
    Retained,
    SnapshotSource,
    StoreStats,
    Usage,
    attribution,
)
from syncd.store.catalogue import Catalogue
from syncd.store.history_index import DEFAULT_RETENTION, HistoryIndex, Retention
from syncd.store.tail import REPLAY_TAIL_PER_CRDT, REPLAY_TAIL_TOTAL, ReplayTail


class MemoryStore:
    shared = False

    def __init__(
        self,
        *,
        replay_tail_per_crdt: int = REPLAY_TAIL_PER_CRDT,
        replay_tail_total: int = REPLAY_TAIL_TOTAL,
        on_written: Callable[[int], None] | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
        history_retention: Retention | None = None,
    ) -> None:
        self.on_written = on_written
        self.on_failure = on_failure
        self.fail_writes = False
        """Set to make every append raise 503 (a full disk, a lost database)."""
        self.entries: list[dict[str, Any]] = []
        self.records: list[Record] = []
        self._tail_bounds = (replay_tail_per_crdt, replay_tail_total)
        self._tail = ReplayTail(*self._tail_bounds)
        self._source: SnapshotSource | None = None
        self._entry: EntrySource | None = None
        self.history_retention = history_retention or Retention.parse(DEFAULT_RETENTION)
        self._history = HistoryIndex()
        self._catalogue = Catalogue()
        self._history_items: dict[int, Record] = {}
        """Position -> op record or checkpoint entry."""
        self._next_position = 0
        self._lsn = 0
        self._snapshot_lsn = 0
        self._opened = False
        self._closed = False
        self.stats = StoreStats()

    async def open(self) -> Recovered:
        self._opened = True
        return self.recovered()

    def recovered(self) -> Recovered:
        """What a restart would load (deep copies: the caller may mutate them)."""
        return Recovered(entries=copy.deepcopy(self.entries), records=copy.deepcopy(self.records))

    def set_snapshot_source(self, source: SnapshotSource, entry: EntrySource | None = None) -> None:
        self._source = source
        self._entry = entry

    @property
    def loads_on_demand(self) -> bool:
        return True

    async def load(self, ns: str, crdt_id: str) -> Loaded | None:
        life = self._history.get(ns, crdt_id)
        if life is None:
            return None
        cp, positions = self._history.base(ns, crdt_id, life.epoch, life.latest, life.latest)
        entry = copy.deepcopy(self._history_items[cp]) if cp is not None else None
        return entry, [copy.deepcopy(self._history_items[p]) for p in positions]

    def holds(self, ns: str, crdt_id: str, epoch: str, seq: int) -> bool:
        return self._history.holds(ns, crdt_id, epoch, seq)

    async def list_ids(self, ns: str, prefix: str, after: str | None, limit: int) -> list[Listed]:
        out: list[Listed] = []
        for crdt_id, type_name in self._catalogue.page(ns, prefix, after, limit):
            life = self._history.get(ns, crdt_id)
            out.append((crdt_id, type_name, life.latest if life is not None else 0))
        return out

    def note_size(self, ns: str, crdt_id: str, size: int) -> None:
        self._catalogue.note_size(ns, crdt_id, size)

    async def usage(self, ns: str) -> Usage:
        return self._catalogue.usage(ns)

    def usage_now(self, ns: str) -> Usage:
        return self._catalogue.usage(ns)

    def usages(self) -> dict[str, Usage]:
        return self._catalogue.usages()

    def usage_total(self) -> tuple[int, Usage]:
        return self._catalogue.usage_total()

    def largest_usages(self, k: int) -> list[tuple[str, Usage]]:
        return self._catalogue.largest_usages(k)

    def unmeasured(self, limit: int) -> list[tuple[str, str]]:
        return self._catalogue.unmeasured(limit)

    async def history(
        self, ns: str, crdt_id: str, epoch: str, latest: int, before: int | None, limit: int
    ) -> tuple[list[Record], int]:
        positions, oldest = self._history.page(ns, crdt_id, epoch, latest, before, limit)
        return [copy.deepcopy(self._history_items[p]) for p in positions], oldest

    async def history_window(
        self, ns: str, crdt_id: str, epoch: str, latest: int, since: int | None, most: int
    ) -> tuple[Retained, int]:
        (positions, _, _, _), oldest = self._history.window(ns, crdt_id, epoch, latest, since, most)
        records = [copy.deepcopy(self._history_items[p]) for p in positions]
        return Retained.of(records), oldest

    async def history_base(
        self, ns: str, crdt_id: str, epoch: str, latest: int, seq: int
    ) -> tuple[dict[str, Any] | None, list[Record]]:
        cp, positions = self._history.base(ns, crdt_id, epoch, latest, seq)
        entry = copy.deepcopy(self._history_items[cp]) if cp is not None else None
        return entry, [copy.deepcopy(self._history_items[p]) for p in positions]

    def compact_history(self, now_ms: int) -> None:
        """Apply the retention as of ``now_ms``: forget what it allows."""
        self._history.trim(self.history_retention, now_ms)
        live = set(self._history.positions())
        for pos in [p for p in self._history_items if p not in live]:
            del self._history_items[pos]

    def _remember(self, record: Record) -> None:
        index = self._history
        if record.get("kind") == "deleted":
            index.deleted(record["ns"], record["id"])
            self._catalogue.remove(record["ns"], record["id"])
            return
        pos = self._next_position
        self._next_position += 2  # room for a checkpoint right after it
        self._history_items[pos] = record
        ns, crdt_id = record["ns"], record["id"]
        index.add_op(
            ns,
            crdt_id,
            record["epoch"],
            record["seq"],
            record["ts"],
            pos,
            100,
            *attribution(record),
        )
        self._catalogue.add(ns, crdt_id, record["type"])
        if self._entry is not None and index.checkpoint_due(ns, crdt_id):
            entry = self._entry(ns, crdt_id)
            if entry is None or entry["seq"] != record["seq"]:
                index.checkpoint_dropped(ns, crdt_id)
                return
            pos += 1
            self._history_items[pos] = copy.deepcopy(entry)
            index.add_checkpoint(ns, crdt_id, entry["epoch"], entry["seq"], pos, 100)

    async def append(self, records: Sequence[Record]) -> None:
        self._append(records)

    def append_soon(self, records: Sequence[Record]) -> asyncio.Future[None]:
        """Appended at once: the future is already done."""
        self._append(records)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    def _append(self, records: Sequence[Record]) -> None:
        if not self._opened or self._closed:
            raise StoreUnavailable("storage is not open")
        if not self.ready:
            error = StoreUnavailable()
            if records and self.on_failure is not None:
                self.on_failure(error)
            raise error
        for record in records:
            self._lsn += 1
            # A copy, as a disk would hold: later mutation by the caller is not persisted.
            stored = copy.deepcopy(record)
            self.records.append(stored)
            self._tail.add(self._lsn, stored)
            self._remember(stored)
        if records:
            self.stats.batches += 1
            self.stats.records_written += len(records)
            if self.on_written is not None:
                self.on_written(len(records))

    async def commit(self, ns: str, crdt_id: str, apply: Callable[[], AppliedT]) -> AppliedT:
        result = apply()
        await self.append(result.records)
        return result

    async def ops_since(self, ns: str, crdt_id: str, epoch: str, since: int) -> list[Record] | None:
        return self._tail.since(ns, crdt_id, epoch, since)

    @property
    def ready(self) -> bool:
        return self._opened and not self._closed and not self.fail_writes

    @property
    def wal_last_seq(self) -> int:
        return self._lsn

    async def reload(self) -> Recovered:
        return self.recovered()

    async def compact_now(self) -> int:
        """Replace the records by a snapshot from the source; the LSN it covers."""
        if self._source is None:
            raise RuntimeError("compact_now() needs a snapshot source")
        self.entries = copy.deepcopy(list(self._source()))
        self.records = []
        self.stats.snapshots += 1
        self._snapshot_lsn = self._lsn
        return self._lsn

    async def close(self) -> None:
        self._closed = True
