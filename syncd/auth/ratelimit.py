"""Per-token request rate: an exact sliding one-second window.

Each tracked token keeps the times of its counted requests still inside the
window, in order. A request is allowed when fewer than ``limit`` of them remain,
so no window of one second ever holds more than ``limit`` allowed requests (a
two-bucket estimate would let bursts at a bucket edge through). Refused
requests are not counted: a client that keeps knocking gets in again as soon as
its oldest counted request leaves the window.

Memory stays bounded however many tokens there are:

- a window holds at most ``limit`` times, and only those of the last second, so
  all windows together hold at most the requests allowed in the last second;
- tokens sit in least-recently-used order; each call forgets a few tokens
  whose last request left the window (idle: they have nothing to remember);
- at ``max_tracked`` tokens, the least recently used is forgotten even if still
  active. That token then starts a fresh window, so it may briefly exceed its
  limit: the price of a hard memory bound when more than ``max_tracked`` tokens
  are active within one second.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

WINDOW_MS = 1000
"""The sliding window: limits are requests per second (docs/permissions.md#rate-limits)."""

MAX_TRACKED_TOKENS = 100_000
"""Tokens tracked at once (a few hundred bytes each when idle-ish)."""

IDLE_SWEEP_PER_CALL = 4
"""Idle tokens forgotten per call: more than the one a call can add, so the
sweep keeps up, and few enough that no single request pays for a big purge."""

COMPACT_AFTER = 32
"""Expired times are skipped with an index and cut off the list in bulk once
this many have gathered (and they are at least half of it): O(1) amortized."""


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class _Window:
    __slots__ = ("head", "times")

    def __init__(self) -> None:
        self.head = 0
        self.times: list[int] = []


class RateLimiter:
    def __init__(
        self,
        *,
        clock_ms: Callable[[], int] = monotonic_ms,
        window_ms: int = WINDOW_MS,
        max_tracked: int = MAX_TRACKED_TOKENS,
    ) -> None:
        if window_ms < 1 or max_tracked < 1:
            raise ValueError("window_ms and max_tracked must be positive")
        self._clock = clock_ms
        self._window_ms = window_ms
        self._max_tracked = max_tracked
        self._windows: OrderedDict[bytes, _Window] = OrderedDict()

    def __len__(self) -> int:
        """Tokens tracked now."""
        return len(self._windows)

    def hit(self, key: bytes, limit: int) -> int:
        """Count one request for ``key`` if it is within ``limit`` per window.

        Returns 0 when the request is allowed (and counted), else the whole
        seconds (at least 1) until it would be: the ``Retry-After`` value.
        """
        now = self._clock()
        cutoff = now - self._window_ms
        windows = self._windows
        w = windows.get(key)
        if w is None:
            w = windows[key] = _Window()
            if len(windows) > self._max_tracked:
                windows.popitem(last=False)
        else:
            windows.move_to_end(key)
        times = w.times
        head = w.head
        n = len(times)
        while head < n and times[head] <= cutoff:
            head += 1
        if head >= COMPACT_AFTER and head * 2 >= n:
            del times[:head]
            n -= head
            head = 0
        w.head = head
        if n - head >= limit:
            self._sweep(cutoff)
            # The request becomes allowed when the limit-th most recent counted
            # request leaves the window.
            wait_ms = times[n - limit] + self._window_ms - now if limit > 0 else self._window_ms
            return max(1, -(-wait_ms // 1000))
        times.append(now)
        # The sweep's first look, here: it stops at once while the least
        # recently used token was hit within the window (the usual case).
        oldest = windows[next(iter(windows))].times
        if not oldest or oldest[-1] <= cutoff:
            self._sweep(cutoff)
        return 0

    def _sweep(self, cutoff: int) -> None:
        windows = self._windows
        for _ in range(IDLE_SWEEP_PER_CALL):
            if not windows:
                return
            key = next(iter(windows))
            times = windows[key].times
            if times and times[-1] > cutoff:
                return
            del windows[key]
