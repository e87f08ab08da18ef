"""Coarse timers shared by many long-lived connections: one loop timer per
slot of time in use, not one per connection.

Theory of operation
-------------------
An idle connection still has timers: a WebSocket its keepalive and the end
of its token's read, an SSE stream its ping and its end. As loop timers they
cost ~600 bytes each (the handle, uvloop's timer object and libuv's, a copied
context, a bound method): a third of what an idle connection costs. A
:class:`Wheel` keeps them in slots of ``resolution`` seconds instead: a slot
is one loop timer and a dict of the entries due in it, and when the slot's
time comes the wheel calls its ``fire`` function with each entry. An entry
costs the wheel a dict slot.

An entry fires at the end of its slot: never early, at most ``resolution``
late (plus the loop's own lag), so each use picks its resolution from what
lateness it can bear (:data:`INTERVAL_SLOTS`, :data:`EXPIRY_RESOLUTION_S`).
A wheel needs no loop to be built: each slot's timer is set on the loop
running when the slot is first used.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import Final, Generic, TypeVar

log = logging.getLogger("syncd.http")

INTERVAL_SLOTS: Final = 16
"""Slots per interval of a periodic timer (a keepalive ping, an SSE comment):
it fires at most 1/16 of its interval late, well inside the quarter of an
interval after which a late keepalive is taken for a stalled loop
(``syncd.ws.base_session.KEEPALIVE_LATE_SHARE``)."""

EXPIRY_RESOLUTION_S: Final = 1.0
"""The slot of the timers that end a read (a token's or a rule's expiry): the
connection or stream ends at most this much after it. Nothing is sent late
meanwhile: deltas of ops made from the end on are dropped by their ``ts``,
and ops are refused by the token's own check. Tokens' expiries are spread
over their lifetimes, so a coarser slot groups more of them per loop timer."""

T = TypeVar("T")


class Slot(dict[T, None]):
    """The entries due in one slot (a dict: ordered, O(1) removal)."""

    __slots__ = ("handle", "key")

    handle: asyncio.TimerHandle
    key: int


class Wheel(Generic[T]):
    __slots__ = ("_fire", "_resolution", "_slots")

    def __init__(self, resolution: float, fire: Callable[[T], None]) -> None:
        if resolution <= 0:
            raise ValueError("resolution must be positive")
        self._resolution = resolution
        self._fire = fire
        """Called with each entry when its slot's time comes."""
        self._slots: dict[int, Slot[T]] = {}

    @property
    def resolution(self) -> float:
        return self._resolution

    def add(self, when: float, entry: T) -> Slot[T]:
        """Fire ``entry`` at the end of the slot holding ``when`` (the loop's
        clock); keep the slot returned to :meth:`remove` it."""
        key = math.ceil(when / self._resolution)
        slot = self._slots.get(key)
        if slot is None:
            slot = Slot()
            slot.key = key
            loop = asyncio.get_running_loop()
            slot.handle = loop.call_at(key * self._resolution, self._run, slot)
            self._slots[key] = slot
        slot[entry] = None
        return slot

    def remove(self, slot: Slot[T], entry: T) -> None:
        """Take ``entry`` out of ``slot`` (nothing if it is not there)."""
        if slot.pop(entry, 0) is None and not slot and self._slots.get(slot.key) is slot:
            slot.handle.cancel()  # the last one out: no empty timer left to fire
            del self._slots[slot.key]

    def __len__(self) -> int:
        """Entries waiting."""
        return sum(len(slot) for slot in self._slots.values())

    def _run(self, slot: Slot[T]) -> None:
        if self._slots.get(slot.key) is slot:
            del self._slots[slot.key]
        fire = self._fire
        # popitem: O(1) each, whatever the slot's size, and an entry that a
        # fire removes meanwhile is not fired.
        while slot:
            entry, _ = slot.popitem()
            try:
                fire(entry)
            except Exception:
                # One entry's bug must not cost the others in the slot their turn.
                log.exception("timer callback failed")
