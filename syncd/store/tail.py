"""The replay tail: each CRDT's most recent op records, kept in memory for ``ops_since``.

A reconnecting subscriber that names ``since`` and ``epoch`` is served from here
instead of a full snapshot when every op after ``since`` is still held. Only
durable records enter the tail (the stores add them once their write is
acknowledged), so a replay never shows an op that a crash could take back.

The tail reads ``kind``, ``ns``, ``id``, ``seq`` and ``epoch`` of a record and
nothing else. A record whose ``seq`` does not follow the held ones (a gap, or a
new epoch) starts the CRDT's tail afresh, so a held run is always contiguous.
"""

from __future__ import annotations

from collections import OrderedDict, deque

from syncd.store.base import Record

REPLAY_TAIL_PER_CRDT = 256
"""Ops held per CRDT: a client that was away for a few hundred ops of one CRDT
gets a replay; further behind, one snapshot is cheaper than the ops anyway."""

REPLAY_TAIL_TOTAL = 50_000
"""Ops held over all CRDTs (tens of MB of small op records); the least recently
written CRDTs lose their tails first."""

_Key = tuple[str, str]


class _Run:
    """One CRDT life's held ops: ``(seq, lsn, record)``, seq ascending and contiguous."""

    __slots__ = ("epoch", "items")

    def __init__(self, epoch: str) -> None:
        self.epoch = epoch
        self.items: deque[tuple[int, int, Record]] = deque()


class ReplayTail:
    """Bounded per-CRDT runs of recent op records, evicted least-recently-written first."""

    def __init__(
        self, per_crdt: int = REPLAY_TAIL_PER_CRDT, total: int = REPLAY_TAIL_TOTAL
    ) -> None:
        if per_crdt < 1 or total < 1:
            raise ValueError("replay tail bounds must be at least 1")
        self._per_crdt = per_crdt
        self._total = total
        self._runs: OrderedDict[_Key, _Run] = OrderedDict()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @property
    def crdt_count(self) -> int:
        return len(self._runs)

    def add(self, lsn: int, record: Record) -> None:
        """Take note of a durable record (``lsn`` is its log sequence number)."""
        kind = record.get("kind")
        if kind == "deleted":
            ns, crdt_id = record.get("ns"), record.get("id")
            if isinstance(ns, str) and isinstance(crdt_id, str):
                self._drop((ns, crdt_id))
            return
        if kind != "op":
            return
        ns, crdt_id, epoch, seq = (
            record.get("ns"),
            record.get("id"),
            record.get("epoch"),
            record.get("seq"),
        )
        if not (
            type(seq) is int
            and isinstance(ns, str)
            and isinstance(crdt_id, str)
            and isinstance(epoch, str)
        ):
            return
        key = (ns, crdt_id)
        runs = self._runs
        run = runs.get(key)
        if run is None or run.epoch != epoch or (run.items and run.items[-1][0] + 1 != seq):
            self._drop(key)
            run = runs[key] = _Run(epoch)
        else:
            runs.move_to_end(key)
        items = run.items
        items.append((seq, lsn, record))
        if len(items) > self._per_crdt:
            items.popleft()
        else:
            self._count += 1
            if self._count > self._total:
                self._evict(key)

    def load(
        self, base_lsn: int, snapshot_tail: list[Record], records: list[tuple[int, Record]]
    ) -> None:
        """Fill an empty tail at start-up: the snapshot's tail (as of ``base_lsn``),
        then the log records after it. Only the last ``total`` records can stay
        held, so older ones are not even looked at; but then the snapshot's tail
        is dropped too, since a run must end at its CRDT's newest op and records
        in between were skipped."""
        if len(records) > self._total:
            records = records[-self._total :]
        else:
            for record in snapshot_tail:
                self.add(base_lsn, record)
        for lsn, record in records:
            self.add(lsn, record)

    def since(self, ns: str, crdt_id: str, epoch: str, since: int) -> list[Record] | None:
        """The held ops with seq > ``since`` if they are all held, else None."""
        run = self._runs.get((ns, crdt_id))
        if run is None or run.epoch != epoch or not run.items:
            return None
        first, last = run.items[0][0], run.items[-1][0]
        if since < first - 1 or since > last:
            return None
        skip = since - first + 1
        return [record for _, _, record in list(run.items)[skip:]]

    def export(self, max_lsn: int) -> list[Record]:
        """Held records with lsn <= ``max_lsn``, least recently written CRDT first, for a
        snapshot; loading them back in this order restores the same recency order."""
        out: list[Record] = []
        for run in self._runs.values():
            for _, lsn, record in run.items:
                if lsn > max_lsn:
                    break
                out.append(record)
        return out

    def _drop(self, key: _Key) -> None:
        run = self._runs.pop(key, None)
        if run is not None:
            self._count -= len(run.items)

    def _evict(self, current: _Key) -> None:
        while self._count > self._total:
            key, run = next(iter(self._runs.items()))
            if key == current:
                # The only run left is the one just written to: trim its oldest ops.
                run.items.popleft()
                self._count -= 1
            else:
                self._drop(key)
