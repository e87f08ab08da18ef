"""Writing a large shared state to one transport, in slices as it drains, and
what is sent meanwhile behind it, in order.

Theory of operation
-------------------
A joining peer's first message can be a whole document (a Yjs step 2, a
snapshot frame, SSE's first event), the same bytes for every peer that joins
the same version (:mod:`syncd.shared_states`). Written at once, each transport
would hold the whole of it until its peer read it; handed over in slices, a
transport holds at most its high-water mark and a slice, each slice a view of
the one shared object (uvloop keeps the view it is given, not a copy; a TLS
transport encrypts only what it holds).

A :class:`Feed` is what a connection still has to write once such a message
has started: the shared state as a read-only view (and the bytes that frame
it, which are the connection's own), then whatever the connection sent while
the state was going out (deltas, answers, pings, a close frame), in order.
:meth:`Feed.pump` writes while the transport takes more: its connection says
when it must wait (the transport went over its high-water mark) and pumps
again when it drains. Bytes of the connection's own that wait in the feed
are counted (``own_bytes``), so the connection can bound them: a peer that
reads nothing must not make the server hold what it is sent.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final

FEED_SLICE_BYTES: Final = 64 * 1024
"""The most of a shared state handed to a transport in one write: small
enough that a transport stops taking slices within this of its high-water
mark, large enough that a 4 MB state is 64 writes, not thousands."""

Piece = bytes | memoryview


class Feed:
    """A connection's output from a shared state on (see the module docstring)."""

    __slots__ = ("_items", "close_after", "own_bytes", "waiting")

    def __init__(self) -> None:
        self._items: deque[Piece] = deque()
        self.own_bytes = 0
        """Bytes of the connection's own (not shared) waiting here."""
        self.waiting = False
        """The transport is over its high-water mark: pump again once it drains."""
        self.close_after = False
        """Close the transport once everything here is written."""

    def __bool__(self) -> bool:
        return bool(self._items)

    def add(self, data: bytes) -> None:
        """Bytes of the connection's own, after what is already here."""
        if data:
            self._items.append(data)
            self.own_bytes += len(data)

    def add_shared(self, state: bytes | bytearray) -> None:
        """A shared state, written in slices of a read-only view (never copied)."""
        if state:
            self._items.append(memoryview(state).toreadonly())

    def pump(self, write: Callable[[Piece], None], wait: Callable[[], bool]) -> bool:
        """Write pieces until ``wait()`` says the transport has enough, or
        nothing is left; True when nothing is left. Consecutive bytes of the
        connection's own go in one write."""
        items = self._items
        while items and not wait():
            item = items[0]
            if type(item) is memoryview:
                if len(item) > FEED_SLICE_BYTES:
                    items[0] = item[FEED_SLICE_BYTES:]
                    write(item[:FEED_SLICE_BYTES])
                else:
                    items.popleft()
                    write(item)
                continue
            own: list[bytes] = []
            while items and type(items[0]) is not memoryview:
                data = items.popleft()
                assert isinstance(data, bytes)
                own.append(data)
            joined = own[0] if len(own) == 1 else b"".join(own)
            self.own_bytes -= len(joined)
            write(joined)
        return not items

    def clear(self) -> None:
        """Drop everything (the connection is gone)."""
        self._items.clear()
        self.own_bytes = 0
