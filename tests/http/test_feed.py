"""The feed: a shared state in slices of views, the connection's own bytes
behind it in order (consecutive ones in one write), and a stop whenever the
transport says it has enough."""

from __future__ import annotations

from syncd.http.feed import FEED_SLICE_BYTES, Feed, Piece

STATE = bytes(range(256)) * (FEED_SLICE_BYTES * 3 // 256 + 7)
"""Three slices and a bit: the last slice is short."""


def test_a_shared_state_goes_out_in_slices_of_views_its_own_bytes_around_it() -> None:
    feed = Feed()
    feed.add(b"head")
    feed.add_shared(STATE)
    feed.add(b"a")
    feed.add(b"b")
    assert feed.own_bytes == 6
    written: list[Piece] = []
    assert feed.pump(written.append, lambda: False)
    assert not feed and feed.own_bytes == 0
    assert written[0] == b"head"
    views = written[1:-1]
    assert all(isinstance(v, memoryview) and v.readonly and v.obj is STATE for v in views)
    assert [len(v) for v in views] == [FEED_SLICE_BYTES] * 3 + [len(STATE) - 3 * FEED_SLICE_BYTES]
    assert b"".join(bytes(v) for v in views) == STATE
    assert written[-1] == b"ab"  # consecutive own bytes: one write


def test_it_stops_when_the_transport_has_enough_and_goes_on_from_there() -> None:
    feed = Feed()
    feed.add_shared(STATE)
    feed.add(b"tail")
    written: list[Piece] = []
    # The transport takes one write, then asks to wait.
    assert not feed.pump(written.append, lambda: len(written) >= 1)
    assert len(written) == 1 and feed.own_bytes == 4
    feed.add(b"!")  # sent while waiting: behind everything
    assert feed.pump(written.append, lambda: False)
    assert b"".join(bytes(w) for w in written) == STATE + b"tail!"


def test_nothing_is_written_while_waiting_and_clear_drops_everything() -> None:
    feed = Feed()
    feed.add_shared(STATE)
    feed.add(b"x")
    written: list[Piece] = []
    assert not feed.pump(written.append, lambda: True)
    assert written == []
    feed.clear()
    assert not feed and feed.own_bytes == 0
    assert feed.pump(written.append, lambda: False) and written == []


def test_empty_pieces_are_not_queued() -> None:
    feed = Feed()
    feed.add(b"")
    feed.add_shared(b"")
    assert not feed
