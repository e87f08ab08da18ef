"""Coalesced writes for broadcast deltas: one send per connection per flush.

Every ``transport.write`` on an idle uvloop transport is a ``send`` system
call at once, and on loopback a send also runs the receiver's side of TCP: it
costs microseconds (about 10 us on the benchmark VM), far more than the Python
around it. Fan-out of each delta to a thousand connections would be a
thousand sends per delta. Instead, the session queues the delta's (shared)
frame bytes, and this flusher writes each dirty connection's queue in one send.

How often to flush is a duty cycle, not a fixed period: after a flush round
that took ``d`` seconds, the next waits ``d * (1 - share) / share``, at most
:data:`MAX_FLUSH_GAP_S` (the cap wins: it bounds the latency coalescing adds,
and past it flushing may take more than ``share`` of the loop). A few
connections flush within microseconds and so on every loop pass (no added
latency); a thousand busy ones flush every few milliseconds, each send then
carrying several deltas. It tunes itself to the machine: slower sends mean
longer gaps.

A round over many connections is cut into slices of :data:`FLUSH_SLICE_S`,
with a loop pass between them: a thousand sends hold the loop for 10 ms or
more, and everything else (reading ops, group-commit completions, acks, the
next deltas) would wait behind them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final, Protocol

FLUSH_SHARE: Final = 0.3
"""The loop's time that broadcast sends may take under load; the rest stays for
reading, ops and acks (ingest must not starve behind fan-out)."""

MAX_FLUSH_GAP_S: Final = 0.010
"""The longest wait between flush rounds, whatever the last one cost: the most
latency coalescing adds, a fifth of a 50 ms delivery budget. Measured with 1000
subscribers at 320k deliveries/s, 25 ms gave p99 ~100 ms where 10 ms gave ~70
ms (on a shared, loaded 2-core VM) for ~10% more of a core."""

FLUSH_SLICE_S: Final = 0.002
"""The longest the flusher holds the loop at once (about 200 loopback sends):
what a group-commit completion or an incoming op may have to wait for it."""

_CHECK_EVERY: Final = 16
"""Targets flushed between clock reads (a clock read costs about a send's 1%)."""


class Flushable(Protocol):
    def flush(self) -> None: ...


class Flusher:
    def __init__(
        self,
        share: float = FLUSH_SHARE,
        max_gap: float = MAX_FLUSH_GAP_S,
        slice_s: float = FLUSH_SLICE_S,
    ) -> None:
        if not 0 < share <= 1:
            raise ValueError("share must be in (0, 1]")
        if max_gap < 0:
            raise ValueError("max_gap must not be negative")
        if slice_s <= 0:
            raise ValueError("slice_s must be positive")
        self._wait_per_busy = (1 - share) / share
        self._max_gap = max_gap
        self._slice = slice_s
        self._dirty: list[Flushable] = []
        """Marked since the current round started: the next round's."""
        self._round: list[Flushable] = []
        self._next = 0
        """Index in ``_round`` of the next target to flush."""
        self._busy = 0.0
        """Time the current round has taken so far."""
        self._scheduled = False
        self._due = float("-inf")
        self._loop: asyncio.AbstractEventLoop | None = None

    def mark(self, target: Flushable) -> None:
        """``target`` has queued output; it is flushed (once) at the next flush."""
        self._dirty.append(target)
        if not self._scheduled:
            self._schedule()

    @property
    def pending(self) -> int:
        return len(self._dirty) + len(self._round) - self._next

    def _schedule(self) -> None:
        self._scheduled = True
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        if self._due <= loop.time():
            loop.call_soon(self._flush)
        else:
            loop.call_at(self._due, self._flush)

    def _flush(self) -> None:
        loop = self._loop
        assert loop is not None
        started = time.perf_counter()
        if self._next >= len(self._round):
            self._round, self._dirty = self._dirty, []
            self._next = 0
            self._busy = 0.0
        targets = self._round
        i = self._next
        n = len(targets)
        deadline = started + self._slice
        try:
            while i < n:
                target = targets[i]
                i += 1
                target.flush()
                if i % _CHECK_EVERY == 0 and time.perf_counter() >= deadline:
                    break
        finally:
            # Also when a flush raised (the loop reports it): the round and the
            # flusher go on, as a flusher stuck "scheduled" would never flush again.
            self._next = i
            self._busy += time.perf_counter() - started
            if i < n:
                loop.call_soon(self._flush)  # the rest of the round, after a loop pass
            else:
                self._round = []
                self._next = 0
                self._scheduled = False
                self._due = loop.time() + min(self._max_gap, self._busy * self._wait_per_busy)
                if self._dirty:
                    self._schedule()
