"""The server's hybrid logical clock, in milliseconds.

Wall-clock milliseconds, except that it never goes backwards and never falls
behind a stamp it has accepted from another node. Unlike a Lamport counter it
does not advance per event (100k ops/s would otherwise run it far ahead of real
time and make client-supplied LWW timestamps lose); ties between events at the
same millisecond are broken where they matter (per CRDT, see
:func:`next_stamp`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

MAX_CLOCK_SKEW_MS = 60_000
"""How far ahead of the server's wall clock a client timestamp may be
(docs/data-model.md#lwwregister): measured from the wall clock, not the hybrid
clock, which may run up to :data:`MAX_FOLLOW_AHEAD_MS` ahead of it."""

MAX_FOLLOW_AHEAD_MS = 60_000
"""A remote stamp is followed only this far past the local wall clock, so one
node with a wild clock cannot drag every other node's clock with it."""


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


_time_ns = time.time_ns


def next_stamp(now_ms: int, previous: int | None) -> int:
    """A stamp that is the clock's time yet strictly after ``previous``.

    Used where one writer's successive writes must keep their order even within
    one millisecond (LWW register sets, presence updates).
    """
    if previous is None or now_ms > previous:
        return now_ms
    return previous + 1


class HybridClock:
    """Monotonic ms clock over an injectable wall clock."""

    __slots__ = ("_last", "_wall")

    def __init__(self, wall_ms: Callable[[], int] = wall_clock_ms) -> None:
        self._wall = wall_ms
        self._last = 0

    def now(self) -> int:
        """The current time, never less than any earlier answer or followed stamp."""
        # The usual wall clock inline: a call less per op.
        wall = _time_ns() // 1_000_000 if self._wall is wall_clock_ms else self._wall()
        if wall > self._last:
            self._last = wall
        return self._last

    def observe(self, remote_ms: int) -> None:
        """Follow a stamp made elsewhere (a replayed record), within bounds."""
        if remote_ms > self._last:
            self._last = min(remote_ms, max(self._last, self._wall() + MAX_FOLLOW_AHEAD_MS))

    @property
    def last(self) -> int:
        return self._last
