"""Which past op records and checkpoints each CRDT keeps, and where they are.

Theory of operation
-------------------
``GET .../history`` pages through a CRDT's retained op records, and ``?at=SEQ``
rebuilds its state right after op SEQ from the newest *checkpoint* (a full
entry map, as a snapshot holds it) at or before SEQ plus the ops after it.
This module is the bookkeeping for both, shared by the stores: a
:class:`HistoryIndex` holds, per CRDT life (ns, id, epoch), the seq, time and
*position* of every retained op record and checkpoint. A position is an
opaque integer of the store's choosing (a file and offset in the embedded
store's history log, a key in the memory store); the store reads the records
back itself.

Checkpoints: a store asks :meth:`HistoryIndex.checkpoint_due` after ops, and
writes the CRDT's entry when the op bytes since the last checkpoint reach the
size of that checkpoint (at least :data:`CHECKPOINT_MIN_BYTES`). Checkpoints
then take at most about as many bytes as the ops between them, and rebuilding
a state replays at most about one state's size of ops.

Retention (:class:`Retention`, ``SERVICE_HISTORY_RETENTION``) keeps *at
least* the promised history: for ``N ops``, the state at ``latest - N`` and
every op after it; for an age, the state before the oldest op younger than
that age and every op after it. :meth:`HistoryIndex.trim` forgets everything
older than the newest base (a checkpoint, or the life's start) that still
covers that point, so more than promised may stay, never less. The store then
drops what no CRDT indexes any more (compaction).

Attribution: for each op the index also keeps its writer (``client_id``)
and a *tag* (:func:`syncd.store.base.attribution`): keys of its origin and
of its delta's op name, and whether it is a revert's op. A revert (syncd/revert.py) finds the
ops of one writer, and the ops of the kinds its type reads, from these,
and decodes only those records (:meth:`HistoryIndex.page_retained`,
:class:`syncd.store.base.Retained`).

The index also answers what is *available*: a life's oldest base is the
oldest seq whose state can be rebuilt (0 when the life's ops are all held).
A life is only trusted while its ops are contiguous up to the CRDT's current
seq: a gap (records lost with a damaged history file) drops what came before
it.
"""

from __future__ import annotations

import bisect
import logging
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from syncd.errors import ApiError, history_expired

log = logging.getLogger("syncd.store")

CHECKPOINT_MIN_BYTES: Final = 16 * 1024
"""Op bytes between two checkpoints of a CRDT with a small state: rebuilding
replays at most about this many bytes of ops (a few hundred small ops, about a
millisecond), while checkpoints of a counter cost a few bytes per 16 KiB."""

_RETENTION_RE: Final = re.compile(r"^\s*(\d+)\s*(ops|s|m|h|d)\s*$")
_UNIT_MS: Final = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

GAP_WARNINGS_KEPT: Final = 4096
"""CRDTs whose gap the index has logged, remembered so each is logged once
(:meth:`HistoryIndex.add_op`). A gap while the server runs is a bug, so
there should be none; the bound keeps a bug that makes one at every op from
growing memory with the CRDT count (past it, the oldest may be logged again)."""

DEFAULT_RETENTION: Final = "1000ops"
"""See docs/operations.md#history-and-retention for the disk this costs."""


@dataclass(frozen=True, slots=True)
class Retention:
    """At least this much history per CRDT: by op count or by age."""

    ops: int | None = None
    age_ms: int | None = None

    @classmethod
    def parse(cls, text: str) -> Retention:
        """``"10000ops"``, ``"7d"``, ``"12h"``, ``"30m"`` or ``"90s"``."""
        m = _RETENTION_RE.match(text)
        if m is None:
            raise ValueError(
                f"{text!r} is not a retention: a count of ops (e.g. 10000ops) "
                "or an age (e.g. 7d, 12h, 30m, 90s)"
            )
        value, unit = int(m.group(1)), m.group(2)
        if unit == "ops":
            return cls(ops=value)
        return cls(age_ms=value * _UNIT_MS[unit])

    def __str__(self) -> str:
        if self.ops is not None:
            return f"{self.ops}ops"
        return f"{(self.age_ms or 0) // 1000}s"


def _expired(ns: str, crdt_id: str, oldest: int) -> ApiError:
    return history_expired(
        f"{ns}/{crdt_id}: the history before seq {oldest} is no longer retained", oldest
    )


Key = tuple[str, str]


class Life:
    """One CRDT life's retained history, seq ascending."""

    __slots__ = (
        "checkpoint_due_at",
        "cp_pos",
        "cp_seqs",
        "epoch",
        "from_start",
        "pending_checkpoint",
        "pos",
        "seqs",
        "since_checkpoint",
        "size",
        "tags",
        "ts",
        "type_name",
        "writers",
    )

    def __init__(self, epoch: str) -> None:
        self.epoch = epoch
        self.seqs = array("q")
        self.ts = array("q")
        self.pos = array("q")
        self.writers = array("q")
        """Each op's ``client_id``."""
        self.tags = array("q")
        """Each op's tag (:func:`syncd.store.base.attribution`)."""
        self.cp_seqs = array("q")
        self.cp_pos = array("q")
        self.from_start = False
        """Whether the held ops start at seq 1 (the empty state is a base)."""
        self.since_checkpoint = 0
        """Op bytes since the newest checkpoint (or the life's start)."""
        self.checkpoint_due_at = CHECKPOINT_MIN_BYTES
        self.pending_checkpoint = False
        self.type_name: str | None = None
        """The CRDT's type, where the index keeps it (the embedded store's
        key directory, embedded/keydir.py; the other stores keep a catalogue)."""
        self.size = -1
        """Its size for the quotas, where the index keeps it (-1: unmeasured)."""

    @property
    def latest(self) -> int:
        if self.seqs:
            return self.seqs[-1]
        return self.cp_seqs[-1] if self.cp_seqs else 0

    def bases(self) -> Iterator[int]:
        if self.from_start:
            yield 0
        yield from self.cp_seqs

    @property
    def oldest(self) -> int | None:
        """The oldest seq whose state can be rebuilt; None when none can."""
        if self.from_start:
            return 0
        return self.cp_seqs[0] if self.cp_seqs else None


class HistoryIndex:
    """Every life in memory. The embedded store's key directory
    (embedded/keydir.py) keeps most of them on disk instead, through the
    hooks :meth:`_find`, :meth:`_put`, :meth:`_forget` and :meth:`_changed`,
    which every method here reads and writes lives by."""

    def __init__(self) -> None:
        self._lives: dict[Key, Life] = {}
        self.recovering = False
        """Whether the index is being built from what a start (or a re-read)
        found on disk, where a gap is expected (records lost with a damaged
        file): only outside it does :meth:`add_op` log one."""
        self._gaps_logged: dict[Key, None] = {}
        """The CRDTs whose gap was logged, oldest first (see GAP_WARNINGS_KEPT)."""

    def __len__(self) -> int:
        return len(self._lives)

    def get(self, ns: str, crdt_id: str) -> Life | None:
        return self._find((ns, crdt_id))

    # -- where lives are kept (overridden by the key directory) ----------------

    def _find(self, key: Key) -> Life | None:
        return self._lives.get(key)

    def _put(self, key: Key, life: Life) -> None:
        self._lives[key] = life

    def _forget(self, key: Key) -> None:
        self._lives.pop(key, None)

    def _changed(self, key: Key) -> None:
        """The life of ``key`` changed in place."""

    def items(self) -> Iterator[tuple[Key, Life]]:
        return iter(list(self._lives.items()))

    # -- adding ------------------------------------------------------------

    def _life(self, key: Key, epoch: str, seq: int) -> Life:
        life = self._find(key)
        if life is None or life.epoch != epoch:
            life = _successor(life, epoch)
            life.from_start = seq == 1
            self._put(key, life)
        return life

    def add_op(
        self,
        ns: str,
        crdt_id: str,
        epoch: str,
        seq: int,
        ts: int,
        pos: int,
        size: int,
        client_id: int = 0,
        tag: int = 0,
    ) -> Life | None:
        """Index one op (``client_id`` and ``tag``: what
        :func:`~syncd.store.base.attribution` says of it; a tag of 0 says
        nothing, and a revert then decodes the record); the life it joined
        (so the op with the next seq may be appended to it directly), or None
        when it was held already."""
        key = (ns, crdt_id)
        life = self._life(key, epoch, seq)
        latest = life.latest
        if seq <= latest and (life.seqs or life.cp_seqs):
            return None  # held already (a copy read back after its original)
        if (life.seqs or life.cp_seqs) and seq != latest + 1:
            # A gap: what came before cannot be rebuilt past it.
            if not self.recovering:
                self._log_gap(key, life, seq)
            life = _successor(life, epoch)
            self._put(key, life)
        else:
            self._changed(key)
        life.seqs.append(seq)
        life.ts.append(ts)
        life.pos.append(pos)
        life.writers.append(client_id)
        life.tags.append(tag)
        life.since_checkpoint += size
        return life

    def _log_gap(self, key: Key, life: Life, seq: int, what: str = "op") -> None:
        """Log (once per CRDT) a gap met while the server runs: every op reaches
        the index in seq order, so one means a bug, and reads of the CRDT's
        state before ``seq`` answer 410 as if retention had dropped them."""
        if key in self._gaps_logged:
            return
        self._gaps_logged[key] = None
        if len(self._gaps_logged) > GAP_WARNINGS_KEPT:
            del self._gaps_logged[next(iter(self._gaps_logged))]
        log.warning(
            "history of %s/%s (life %s): %s %d follows seq %d (held from %s, checkpoints %s); "
            "a new life starts there and the state before it can no longer be rebuilt",
            key[0],
            key[1],
            life.epoch,
            what,
            seq,
            life.latest,
            life.seqs[0] if life.seqs else "none",
            life.cp_seqs.tolist()[-4:],
        )

    def add_checkpoint(
        self, ns: str, crdt_id: str, epoch: str, seq: int, pos: int, size: int
    ) -> None:
        key = (ns, crdt_id)
        life = self._find(key)
        if life is None or life.epoch != epoch:
            life = _successor(life, epoch)
            self._put(key, life)
        elif seq > life.latest and (life.seqs or life.cp_seqs):
            # Past every op held: the ops between are not held, so the life
            # starts afresh here, with this checkpoint its base. Appended to
            # the old one instead, ``latest`` stayed at its last op and the
            # next op (seq + 1) was taken for a gap: a life with no base, and
            # every read of the CRDT 410. A start meets this where retention
            # and compaction dropped the ops after a key directory table's
            # row (the frames after the table's end begin at the checkpoint).
            if not self.recovering:
                self._log_gap(key, life, seq, "checkpoint")
            life = _successor(life, epoch)
            self._put(key, life)
        life.pending_checkpoint = False
        if life.cp_seqs and seq <= life.cp_seqs[-1]:
            return
        if life.seqs and seq < life.seqs[0] - 1:
            return  # older than the ops held: of no use
        self._changed(key)
        life.cp_seqs.append(seq)
        life.cp_pos.append(pos)
        if seq >= life.latest:
            life.since_checkpoint = 0
            life.checkpoint_due_at = max(CHECKPOINT_MIN_BYTES, size)

    def deleted(self, ns: str, crdt_id: str) -> None:
        self._forget((ns, crdt_id))

    def checkpoint_due(self, ns: str, crdt_id: str) -> bool:
        """Whether the store should write a checkpoint of this CRDT now (and it
        then calls :meth:`add_checkpoint`, or :meth:`checkpoint_dropped`)."""
        life = self._find((ns, crdt_id))
        if life is None or life.pending_checkpoint:
            return False
        if life.since_checkpoint < life.checkpoint_due_at:
            return False
        life.pending_checkpoint = True
        return True

    def checkpoint_dropped(self, ns: str, crdt_id: str) -> None:
        life = self._find((ns, crdt_id))
        if life is not None:
            life.pending_checkpoint = False

    # -- reading -----------------------------------------------------------

    def page(
        self, ns: str, crdt_id: str, epoch: str, latest: int, before: int | None, limit: int
    ) -> tuple[list[int], int]:
        """Positions of up to ``limit`` ops with seq below ``before`` (and at most
        ``latest``), newest first, and the oldest seq whose state can be rebuilt."""
        life = self._usable(ns, crdt_id, epoch, latest)
        if life is None:
            return [], latest
        oldest = life.oldest
        end = bisect.bisect_left(
            life.seqs, latest + 1 if before is None else min(before, latest + 1)
        )
        start = max(0, end - limit)
        positions = [life.pos[i] for i in range(end - 1, start - 1, -1)]
        return positions, latest if oldest is None else oldest

    def window(
        self, ns: str, crdt_id: str, epoch: str, latest: int, since: int | None, most: int
    ) -> tuple[tuple[list[int], list[int], list[int], list[int]], int]:
        """What the index knows of the first ``most`` ops from seq ``since``
        on (None: from the oldest rebuildable seq plus one) up to ``latest``, ascending:
        ``(positions, seqs, writers, tags)``; and the oldest rebuildable seq."""
        life = self._usable(ns, crdt_id, epoch, latest)
        if life is None:
            return ([], [], [], []), latest
        oldest = latest if life.oldest is None else life.oldest
        lo = bisect.bisect_left(life.seqs, oldest + 1 if since is None else since)
        hi = min(bisect.bisect_right(life.seqs, latest), lo + most)
        return (
            life.pos[lo:hi].tolist(),
            life.seqs[lo:hi].tolist(),
            life.writers[lo:hi].tolist(),
            life.tags[lo:hi].tolist(),
        ), oldest

    def base(
        self, ns: str, crdt_id: str, epoch: str, latest: int, seq: int
    ) -> tuple[int | None, list[int]]:
        """Where to rebuild the state at ``seq`` from: the checkpoint's position
        (None: the empty state) and the positions of the ops after it up to
        ``seq``. Raises ``history_expired`` when ``seq`` is older than retained."""
        life = self._usable(ns, crdt_id, epoch, latest)
        oldest = None if life is None else life.oldest
        if life is None or oldest is None or seq < oldest:
            raise _expired(ns, crdt_id, latest if oldest is None else oldest)
        i = bisect.bisect_right(life.cp_seqs, seq) - 1
        if i >= 0:
            cp_seq, cp_pos = life.cp_seqs[i], life.cp_pos[i]
        else:
            cp_seq, cp_pos = 0, None
        lo = bisect.bisect_right(life.seqs, cp_seq)
        hi = bisect.bisect_right(life.seqs, seq)
        return cp_pos, list(life.pos[lo:hi])

    def since(self, ns: str, crdt_id: str, epoch: str, since: int, most: int) -> list[int] | None:
        """Positions of the ops of life ``epoch`` after seq ``since``; None when
        not every one is held, or there are more than ``most``."""
        life = self._find((ns, crdt_id))
        if life is None or life.epoch != epoch:
            return None
        latest = life.latest
        if since >= latest:
            return [] if since == latest else None
        if latest - since > most:
            return None
        seqs = life.seqs
        i = bisect.bisect_right(seqs, since)
        if i >= len(seqs) or seqs[i] != since + 1:
            return None  # the first op wanted is no longer retained
        return list(life.pos[i:])

    def holds(self, ns: str, crdt_id: str, epoch: str, seq: int) -> bool:
        """Whether the current state of life ``epoch``, at ``seq``, can be rebuilt:
        the index holds that life up to ``seq`` and nothing after it."""
        life = self._usable(ns, crdt_id, epoch, seq)
        return life is not None and life.latest == seq and life.oldest is not None

    def _usable(self, ns: str, crdt_id: str, epoch: str, latest: int) -> Life | None:
        """Life ``epoch`` if the index holds it up to ``latest`` at least. A
        reader names the seq it answers at; the index may have moved past it
        meanwhile (a write while the reader waited for the lock), and the
        reads above answer up to ``latest`` only."""
        life = self._find((ns, crdt_id))
        if life is None or life.epoch != epoch or life.latest < latest:
            return None  # not held up to latest (lost, or another life)
        return life

    # -- retention -----------------------------------------------------------

    def trim(self, retention: Retention, now_ms: int) -> int:
        """Forget what ``retention`` no longer asks for; the entries forgotten."""
        dropped = 0
        for _, life in self.items():
            dropped += trim_life(life, retention, now_ms)
        return dropped

    def positions(self) -> Iterator[int]:
        """Every position the index still needs."""
        for life in self._lives.values():
            yield from life.pos
            yield from life.cp_pos

    def relocate(self, moved: dict[int, int]) -> None:
        """Positions that moved (compaction copied their records elsewhere)."""
        for life in self._lives.values():
            for arr in (life.pos, life.cp_pos):
                for i, p in enumerate(arr):
                    new = moved.get(p)
                    if new is not None:
                        arr[i] = new


def _successor(life: Life | None, epoch: str) -> Life:
    """A new life in the place of ``life`` (another epoch, or after a gap),
    keeping what the index knows of the CRDT itself."""
    new = Life(epoch)
    if life is not None:
        new.type_name, new.size = life.type_name, life.size
    return new


def trim_life(life: Life, retention: Retention, now_ms: int) -> int:
    seqs = life.seqs
    latest = life.latest
    if retention.ops is not None:
        floor = max(0, latest - retention.ops)
    else:
        young = bisect.bisect_left(life.ts, now_ms - (retention.age_ms or 0))
        # ts is not strictly sorted (hybrid clock per node), but near enough: a
        # few ops kept longer than promised is within "at least".
        floor = seqs[young] - 1 if young < len(seqs) else latest
    base = None
    for candidate in life.bases():
        if candidate <= floor:
            base = candidate
    if base is None:
        return 0  # nothing old enough to start from: keep it all
    n_ops = bisect.bisect_right(seqs, base)
    n_cps = bisect.bisect_left(life.cp_seqs, base)
    if n_ops:
        del life.seqs[:n_ops], life.ts[:n_ops], life.pos[:n_ops]
        del life.writers[:n_ops], life.tags[:n_ops]
    if n_cps:
        del life.cp_seqs[:n_cps], life.cp_pos[:n_cps]
    if base > 0:
        life.from_start = False
    return n_ops + n_cps
