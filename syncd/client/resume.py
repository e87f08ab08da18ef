"""Resume logic shared by ``subscribe`` (WebSocket) and ``events`` (SSE), no I/O.

A :class:`ResumeTracker` remembers, per CRDT id, the last delivered ``seq`` and
the ``epoch`` (the CRDT's life) and judges every incoming delta:

- a snapshot replaces the state, whatever its seq (a jump is fine), unless it
  is exactly the position already held (a reconnect's repeat);
- an op delta of the held epoch is delivered when its seq is ``last + 1``,
  skipped when already seen (``seq <= last``: a replay overlapping the live
  stream), and a *gap* otherwise: the caller resubscribes with ``since`` and
  the deltas in between are skipped until the replay or a snapshot arrives;
- an op delta of another epoch starts a new life only at seq 1 after a
  ``deleted`` (or a seq-0 snapshot of an id that did not exist); otherwise the
  delete was missed, which is a gap too;
- ``deleted`` resets the position.

After a reconnect the caller asks :meth:`ResumeTracker.resume_from` for the
``since``/``epoch`` to send.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final


class Verdict(Enum):
    DELIVER = "deliver"
    """Hand the delta to the application."""
    SKIP = "skip"
    """Drop it (already seen, not ours, or waiting for a resync)."""
    RESYNC = "resync"
    """A gap: drop it and resubscribe with ``since`` (the tracker now waits)."""


@dataclass(slots=True)
class Position:
    seq: int = 0
    epoch: str | None = None
    started: bool = False
    """A snapshot (or a resumable position) has been seen for this id."""
    resyncing: bool = False
    """A gap was reported; further gaps are skipped until the stream is whole again."""


class ResumeTracker:
    def __init__(self, ids: Iterable[str]) -> None:
        self._positions: dict[str, Position] = {crdt_id: Position() for crdt_id in ids}

    @property
    def ids(self) -> list[str]:
        return list(self._positions)

    def position(self, crdt_id: str) -> Position:
        return self._positions[crdt_id]

    def resume_from(self, crdt_id: str) -> tuple[int, str] | None:
        """``(since, epoch)`` to resubscribe with, or None for a fresh snapshot."""
        pos = self._positions[crdt_id]
        if pos.started and pos.epoch is not None and pos.seq > 0:
            return pos.seq, pos.epoch
        return None

    def restart(self, crdt_id: str) -> None:
        """Forget the position: the next subscription starts from a snapshot."""
        self._positions[crdt_id] = Position()

    def accept(self, delta: Mapping[str, Any]) -> Verdict:
        crdt_id = delta.get("id")
        pos = self._positions.get(crdt_id) if isinstance(crdt_id, str) else None
        if pos is None:
            return Verdict.SKIP
        kind = delta.get("kind")
        if kind == "snapshot":
            seq = delta.get("seq") or 0
            epoch = delta.get("epoch")
            if pos.started and not pos.resyncing and seq == pos.seq and epoch == pos.epoch:
                return Verdict.SKIP
            pos.seq, pos.epoch, pos.started, pos.resyncing = seq, epoch, True, False
            return Verdict.DELIVER
        if kind == "deleted":
            pos.seq, pos.epoch, pos.started, pos.resyncing = 0, None, True, False
            return Verdict.DELIVER
        if kind != "op" or not pos.started:
            return Verdict.SKIP
        seq = delta.get("seq")
        if type(seq) is not int:
            return Verdict.SKIP
        epoch = delta.get("epoch", pos.epoch)
        if epoch == pos.epoch:
            if seq <= pos.seq:
                return Verdict.SKIP
            if seq == pos.seq + 1:
                pos.seq = seq
                pos.resyncing = False
                return Verdict.DELIVER
        elif pos.epoch is None and pos.seq == 0 and seq == 1:
            pos.seq, pos.epoch, pos.resyncing = 1, epoch, False
            return Verdict.DELIVER
        if pos.resyncing:
            return Verdict.SKIP
        pos.resyncing = True
        return Verdict.RESYNC


RECONNECT_BASE_S: Final = 0.05
"""First wait before reconnecting: a restart takes at least this long, and a
brief blip should cost little."""
RECONNECT_MAX_S: Final = 5.0
"""Longest wait between attempts: a client notices a server back within this."""


_MAX_DOUBLINGS: Final = 32
"""Far past any ceiling; keeps ``2**n`` a small number however long the outage."""


class Backoff:
    """Exponential backoff with full jitter (each wait uniform in [d/2, d])."""

    def __init__(
        self,
        base_s: float = RECONNECT_BASE_S,
        max_s: float = RECONNECT_MAX_S,
        *,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if base_s <= 0 or max_s < base_s:
            raise ValueError("backoff needs 0 < base_s <= max_s")
        self._base = base_s
        self._max = max_s
        self._rand = rand
        self._attempt = 0

    @property
    def attempt(self) -> int:
        return self._attempt

    def next_delay(self) -> float:
        ceiling: float = min(self._max, self._base * 2.0 ** min(self._attempt, _MAX_DOUBLINGS))
        self._attempt += 1
        return ceiling * (0.5 + 0.5 * self._rand())

    def reset(self) -> None:
        self._attempt = 0
