"""Which ``op_id``s a CRDT remembers, by count and by time, in little memory.

Theory of operation
-------------------
A client that got no answer sends the same op with the same ``op_id`` again;
the engine must recognise the repeat and answer as the first time did. How
long must it remember? A count alone (the last N ids) fails a request that a
server reads late: a node paused by ``SIGSTOP`` or a long GC reads the stale
request after the client retried elsewhere, and on a busy CRDT N later ops
may have come in between. A time alone costs memory in proportion to the
rate. So an id is remembered while **either** holds: it is among the last
``window`` ids of its CRDT, **or** it is younger than ``ttl_ms`` (times are
the records' hybrid-clock stamps, the same on every node and after a restart).

Two tiers keep that cheap:

- *recent*: the last ``window`` ids, each with its answer (seq and the answer
  extras such as an rga insert's ``ids``), in an ``OrderedDict``: a repeat in
  the common case is one dict lookup. About 250 bytes an id. An rga insert's
  ``ids`` (one run of counters of one client, as many as it inserted: a
  million for a megabyte of text) are held as that run (:class:`_IdRun`)
  and spelt out again for a repeat and a snapshot, so that an answer costs
  the same few bytes however long the insert was.
- *aged*: ids that left the window while still younger than the TTL, as a
  64-bit hash and a seq. They gather in an *open* dict for ``BUCKET_SPAN_MS``
  of stamps, then are *sealed* into a bucket of two sorted ``array('q')``
  columns (16 bytes an id), searched with ``bisect``. A bucket whose newest
  stamp is older than the TTL is dropped whole. Answer extras stay only when
  an op had some (rga inserts), in a side dict.

A miss (every new op_id on a CRDT that has an aged tier) would search every
bucket; a bitmap of the aged hashes (``FILTER_BITS_PER_ID`` bits an id, one
bit per hash) turns most misses away after one bit test. Bits are set as ids
age and cleared only by a rebuild when the ids it was sized for have turned
over, so it may answer "maybe" for an expired id, never "no" for a held one.

A 64-bit hash may collide: with a million aged ids the chance that a new
op_id is taken for a repeat is about 5e-14 per op. The hash is BLAKE2b, not
Python's ``hash`` (randomised per process), since the aged tier is written
into snapshots and must mean the same after a restart.

A CRDT that takes fewer than ``window`` ops per TTL never has an aged tier,
and its ops pay nothing for one.
"""

from __future__ import annotations

import bisect
import hashlib
import re
import sys
from array import array
from collections import OrderedDict
from typing import Any, Final

OP_ID_TTL_MS: Final = 120_000
"""How long an ``op_id`` is remembered at least (``SERVICE_OP_ID_TTL_S``): longer
than a client's request timeout (typically 30 s) times a few retries, and than
a stalled node (a long GC, a frozen VM, the fault test's 10 s ``SIGSTOP``)."""

BUCKET_SPAN_MS: Final = 5_000
"""Stamps one aged bucket covers before it is sealed. Smaller buckets free
memory closer to the TTL but make a miss search more of them (TTL / span,
24 with the defaults, each a C ``bisect``)."""

FILTER_BITS_PER_ID: Final = 16
"""Bits of the aged tier's bitmap per aged id: one in about 16 misses still
searches the buckets (measured with perf.studies.op_ids: a miss from ~15 us to ~1 us)."""

_EMPTY: Final[dict[str, Any]] = {}

PACK_MIN_IDS: Final = 8
"""Answer ``ids`` lists at least this long are held as a run (:class:`_IdRun`)."""


class _IdRun:
    """An answer's ``ids`` that are one run, ``"<first>@<client>"`` to
    ``"<first + count - 1>@<client>"`` (an rga insert's), as that run."""

    __slots__ = ("client", "count", "first")

    def __init__(self, client: str, first: int, count: int) -> None:
        self.client = client
        self.first = first
        self.count = count

    def ids(self) -> list[str]:
        tail = f"@{self.client}"
        return [f"{counter}{tail}" for counter in range(self.first, self.first + self.count)]


_RUN_END: Final = re.compile(r"(0|[1-9][0-9]*)@(0|-?[1-9][0-9]*)")
"""An id as :meth:`_IdRun.ids` spells it (ASCII digits, no leading zeros)."""


def _run_end(element: Any) -> tuple[int, str] | None:
    """``(counter, client)`` of an id spelt as :meth:`_IdRun.ids` spells it."""
    if type(element) is not str:
        return None
    found = _RUN_END.fullmatch(element)
    if found is None:
        return None
    return int(found[1]), found[2]


def _packed(extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` with its ``ids`` held as a run when they are one (the ends
    and the count say so: the one answer with ``ids``, an rga insert's, is
    always one run); else ``extra`` itself."""
    ids = extra.get("ids")
    if type(ids) is not list or len(ids) < PACK_MIN_IDS:
        return extra
    first, last = _run_end(ids[0]), _run_end(ids[-1])
    if first is None or last is None or first[1] != last[1] or last[0] - first[0] != len(ids) - 1:
        return extra
    return {**extra, "ids": _IdRun(first[1], first[0], len(ids))}


def _unpacked(extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` as it was answered (its ``ids`` spelt out)."""
    ids = extra.get("ids")
    if type(ids) is _IdRun:
        return {**extra, "ids": ids.ids()}
    return extra


Hit = tuple[int, dict[str, Any]]
"""The first answer of an op_id: its seq and its answer extras."""


def _column(data: bytes) -> array[int]:
    column = array("q")
    column.frombytes(data)
    if sys.byteorder == "big":
        column.byteswap()
    return column


def _column_bytes(column: array[int]) -> bytes:
    if sys.byteorder == "big":
        column = array("q", column)
        column.byteswap()
    return column.tobytes()


def op_id_hash(op_id: str) -> int:
    """A stable signed 64-bit hash of ``op_id`` (the aged tier's key)."""
    digest = hashlib.blake2b(op_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


class _Bucket:
    """Sealed aged ids: hashes sorted, with their seqs; extras only where an op had some."""

    __slots__ = ("extras", "hashes", "newest", "seqs")

    def __init__(
        self, newest: int, hashes: array[int], seqs: array[int], extras: dict[int, dict[str, Any]]
    ) -> None:
        self.newest = newest
        self.hashes = hashes
        self.seqs = seqs
        self.extras = extras

    @classmethod
    def seal(cls, newest: int, ids: dict[int, int], extras: dict[int, dict[str, Any]]) -> _Bucket:
        keys = sorted(ids)
        return cls(newest, array("q", keys), array("q", [ids[k] for k in keys]), extras)

    def get(self, h: int) -> Hit | None:
        hashes = self.hashes
        i = bisect.bisect_left(hashes, h)
        if i < len(hashes) and hashes[i] == h:
            return self.seqs[i], _unpacked(self.extras.get(h, _EMPTY))
        return None


class OpIdMemory:
    """One CRDT's remembered op_ids (see the module docstring)."""

    __slots__ = (
        "_filter",
        "_filter_left",
        "_filter_mask",
        "_open",
        "_open_extras",
        "_open_first",
        "_open_newest",
        "_sealed",
        "recent",
    )

    def __init__(self) -> None:
        self.recent: OrderedDict[str, tuple[int, dict[str, Any], int]] = OrderedDict()
        """op_id -> (seq, answer extras, stamp), oldest first: the last ``window``."""
        self._sealed: list[_Bucket] = []
        self._open: dict[int, int] = {}
        self._open_extras: dict[int, dict[str, Any]] = {}
        self._open_first = 0
        self._open_newest = 0
        self._filter = bytearray()
        self._filter_mask = 0
        self._filter_left = 0
        """Aged ids the bitmap may take before it is rebuilt at a larger size."""

    def __len__(self) -> int:
        """How many op_ids are remembered (both tiers)."""
        return len(self.recent) + len(self._open) + sum(len(b.hashes) for b in self._sealed)

    def __iter__(self) -> Any:
        """The recent tier's op_ids, oldest first."""
        return iter(self.recent)

    def get(self, op_id: str) -> Hit | None:
        """The first answer of ``op_id`` if it is remembered."""
        hit = self.recent.get(op_id)
        if hit is not None:
            return hit[0], _unpacked(hit[1])
        if not self._open and not self._sealed:
            return None
        h = op_id_hash(op_id)
        bit = h & self._filter_mask
        if not self._filter[bit >> 3] & (1 << (bit & 7)):
            return None
        seq = self._open.get(h)
        if seq is not None:
            return seq, _unpacked(self._open_extras.get(h, _EMPTY))
        for bucket in self._sealed:
            found = bucket.get(h)
            if found is not None:
                return found
        return None

    def remember(
        self, op_id: str, seq: int, extra: dict[str, Any], ts: int, window: int, ttl_ms: int
    ) -> None:
        """Note ``op_id``'s first answer, stamped ``ts``; ids that leave the last
        ``window`` move to the aged tier while younger than ``ttl_ms``."""
        recent = self.recent
        recent[op_id] = (seq, _packed(extra) if extra else extra, ts)
        if len(recent) <= window:
            return
        horizon = ts - ttl_ms
        while len(recent) > window:
            old_id, (old_seq, old_extra, old_ts) = recent.popitem(last=False)
            if old_ts > horizon:
                self._age(op_id_hash(old_id), old_seq, old_extra, old_ts)
        self._expire(horizon)

    def _age(self, h: int, seq: int, extra: dict[str, Any], ts: int) -> None:
        if not self._open:
            self._open_first = ts
        elif ts - self._open_first >= BUCKET_SPAN_MS:
            self._seal()
            self._open_first = ts
        self._open[h] = seq
        if extra:
            self._open_extras[h] = extra
        if self._filter_left <= 0:
            self._rebuild_filter()
        else:
            self._filter_left -= 1
            bit = h & self._filter_mask
            self._filter[bit >> 3] |= 1 << (bit & 7)
        if ts > self._open_newest:
            self._open_newest = ts

    def _rebuild_filter(self) -> None:
        """A bitmap for twice the ids held now: bits of expired ids go, and the
        cost of a rebuild is spread over as many agings as ids it holds."""
        held = len(self._open) + sum(len(b.hashes) for b in self._sealed)
        want = max(1024, 2 * held * FILTER_BITS_PER_ID)
        size = 1 << (want - 1).bit_length()
        bitmap = bytearray(size >> 3)
        mask = size - 1
        for h in self._open:
            bit = h & mask
            bitmap[bit >> 3] |= 1 << (bit & 7)
        for bucket in self._sealed:
            for h in bucket.hashes:
                bit = h & mask
                bitmap[bit >> 3] |= 1 << (bit & 7)
        self._filter, self._filter_mask = bitmap, mask
        self._filter_left = max(held, 512)

    def _seal(self) -> None:
        if self._open:
            self._sealed.append(_Bucket.seal(self._open_newest, self._open, self._open_extras))
        self._open = {}
        self._open_extras = {}
        self._open_newest = 0

    def _expire(self, horizon: int) -> None:
        sealed = self._sealed
        while sealed and sealed[0].newest <= horizon:
            del sealed[0]
        if self._open and self._open_newest <= horizon:
            self._open = {}
            self._open_extras = {}
            self._open_newest = 0

    # -- snapshots ------------------------------------------------------------

    def export(self) -> tuple[list[list[Any]], list[list[Any]]]:
        """``(recent, aged)`` as msgpack-able lists: recent ``[op_id, seq, extra,
        ts]`` oldest first; aged buckets ``[newest, hashes, seqs, [[hash, extra]...]]``
        with the columns as little-endian int64 bytes."""
        recent = [
            [op_id, seq, _unpacked(extra), ts] for op_id, (seq, extra, ts) in self.recent.items()
        ]
        buckets = list(self._sealed)
        if self._open:
            buckets.append(_Bucket.seal(self._open_newest, self._open, self._open_extras))
        aged = [
            [
                b.newest,
                _column_bytes(b.hashes),
                _column_bytes(b.seqs),
                [[h, _unpacked(x)] for h, x in b.extras.items()],
            ]
            for b in buckets
        ]
        return recent, aged

    @classmethod
    def load(cls, recent: Any, aged: Any, *, now_ms: int, window: int, ttl_ms: int) -> OpIdMemory:
        """The memory that :meth:`export` wrote, with the bounds in force now.
        An entry written before stamps were kept (``[op_id, seq, extra]``) counts
        as stamped 0: it stays only while within the window."""
        memory = cls()
        horizon = now_ms - ttl_ms
        items = list(recent or ())
        keep_from = max(0, len(items) - window)
        for i, item in enumerate(items):
            op_id, seq, extra = item[0], item[1], item[2]
            ts = item[3] if len(item) > 3 else 0
            if extra:
                extra = _packed(extra)
            if i >= keep_from:
                memory.recent[op_id] = (seq, extra, ts)
            elif ts > horizon:
                memory._age(op_id_hash(op_id), seq, extra, ts)
        memory._seal()
        for newest, hashes, seqs, extras in aged or ():
            if newest <= horizon:
                continue
            memory._sealed.append(
                _Bucket(newest, _column(hashes), _column(seqs), {h: _packed(x) for h, x in extras})
            )
        memory._sealed.sort(key=lambda b: b.newest)
        if memory._open or memory._sealed:
            memory._rebuild_filter()
        return memory

    def approx_bytes(self) -> int:
        """About what this memory takes (for the engine's memory budget)."""
        aged = sum(16 * len(b.hashes) + 200 * len(b.extras) for b in self._sealed)
        return 250 * len(self.recent) + 110 * len(self._open) + aged + len(self._filter)


__all__ = [
    "BUCKET_SPAN_MS",
    "FILTER_BITS_PER_ID",
    "OP_ID_TTL_MS",
    "Hit",
    "OpIdMemory",
    "op_id_hash",
]
