"""The session every WebSocket runs on, without a protocol: whole messages to
``on_message``, read backpressure (in-flight requests, holds, a peer that does
not read), keepalive and closing; bytes and the clock in, actions out."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from syncd.ws.base_session import (
    Action,
    BaseSession,
    Close,
    Finish,
    Leaving,
    PauseReading,
    ResumeReading,
    Send,
)
from syncd.ws.framing import CLOSE_GOING_AWAY, CLOSE_INTERNAL_ERROR
from tests.ws.support import client_frame, parse_frame

PING_S = 10.0
MAX_INFLIGHT = 4
RESUME_INFLIGHT = 2


class Harness:
    """A bare session whose actions and messages land in lists."""

    def __init__(self) -> None:
        self.actions: list[Action] = []
        self.messages: list[bytes | str] = []
        self.react: Callable[[bytes | str], None] | None = None
        """What the protocol does with a message, beyond noting it."""
        self.session = BaseSession(
            self.actions.append,
            self,
            max_message_bytes=1024,
            ping_s=PING_S,
            now=0.0,
            max_inflight=MAX_INFLIGHT,
            resume_inflight=RESUME_INFLIGHT,
        )

    def on_message(self, data: bytes | str) -> None:
        self.messages.append(data)
        if self.react is not None:
            self.react(data)

    def feed(self, *payloads: bytes, now: float = 1.0) -> None:
        data = b"".join(client_frame(0x2, payload) for payload in payloads)
        self.session.data_received(data, now)

    def take(self) -> list[Action]:
        actions, self.actions[:] = list(self.actions), []
        return actions


def test_whole_messages_go_to_on_message_and_pings_are_answered() -> None:
    h = Harness()
    h.session.data_received(
        client_frame(0x2, b"one") + client_frame(0x9, b"hb") + client_frame(0x1, b"two"), 1.0
    )
    assert h.messages == [b"one", "two"]
    (pong,) = h.take()
    assert isinstance(pong, Send) and parse_frame(bytearray(pong.data)) == (0xA, b"hb")


def test_a_hold_stops_handling_messages_until_each_hold_is_released() -> None:
    h = Harness()
    h.session.hold()
    h.session.hold()
    assert h.take() == [PauseReading()]  # once, however many hold
    h.feed(b"a", b"b")
    assert h.messages == []  # buffered, not handled
    h.session.release()
    assert h.messages == [] and h.take() == []
    h.session.release()
    assert h.messages == [b"a", b"b"]
    assert h.take() == [ResumeReading()]


def test_a_message_that_holds_reading_is_the_last_handled() -> None:
    h = Harness()
    session = h.session

    def react(data: bytes | str) -> None:
        if data == b"load":
            session.hold()  # e.g. a Yjs document read from the store first

    h.react = react
    h.feed(b"first", b"load", b"after")
    assert h.messages == [b"first", b"load"]
    assert h.take() == [PauseReading()]
    session.release()
    assert h.messages == [b"first", b"load", b"after"]
    assert h.take() == [ResumeReading()]


def test_reading_stops_at_max_inflight_and_resumes_at_resume_inflight() -> None:
    h = Harness()
    session = h.session

    h.react = lambda data: session.started()  # each message a request in flight
    h.feed(*(bytes([i]) for i in range(MAX_INFLIGHT + 3)))
    assert len(h.messages) == MAX_INFLIGHT and session.inflight == MAX_INFLIGHT
    assert session.held and h.take() == [PauseReading()]
    session.settled()  # MAX - 1 in flight: still above the resume mark
    assert len(h.messages) == MAX_INFLIGHT and h.take() == []
    for _ in range(MAX_INFLIGHT - RESUME_INFLIGHT - 1):
        session.settled()
    # At the resume mark: the rest is handled at once, up to the limit again.
    assert len(h.messages) == MAX_INFLIGHT + RESUME_INFLIGHT
    assert session.held and ResumeReading() not in h.take()  # held again: no resume between
    for _ in range(MAX_INFLIGHT - RESUME_INFLIGHT):
        session.settled()
    assert len(h.messages) == MAX_INFLIGHT + 3
    assert not session.held and h.take() == [ResumeReading()]


def test_holds_count_with_the_inflight_limit() -> None:
    h = Harness()
    session = h.session
    session.hold()
    session.started()
    session.settled()
    assert session.held  # the hold still stands
    session.release()
    assert not session.held and h.take() == [PauseReading(), ResumeReading()]


def test_a_peer_that_does_not_read_gets_no_more_messages_handled() -> None:
    h = Harness()
    h.session.write_paused = True  # the adapter's transport is over its bound
    h.feed(b"a", b"b", b"c")
    assert h.messages == []  # buffered, not handled (not even the first)
    assert h.session.unread > 0
    h.session.writing_resumed()
    assert h.messages == [b"a", b"b", b"c"] and h.session.unread == 0


def test_a_close_behind_held_messages_is_honoured_after_handling_them() -> None:
    h = Harness()
    h.session.write_paused = True  # the peer reads nothing of ours
    h.feed(b"a", b"b")
    assert h.messages == [] and h.take() == []
    h.session.data_received(client_frame(0x8, CLOSE_GOING_AWAY.to_bytes(2, "big")), 2.0)
    # The peer is leaving: nothing more goes out (Leaving), so what it sent
    # before its close is handled now, then the close is answered.
    leaving, finish = h.take()
    assert isinstance(leaving, Leaving) and isinstance(finish, Finish)
    assert parse_frame(bytearray(finish.data)) == (0x8, CLOSE_GOING_AWAY.to_bytes(2, "big"))
    assert h.messages == [b"a", b"b"] and h.session.closing


def test_a_close_split_across_reads_is_found_once_whole() -> None:
    h = Harness()
    h.session.write_paused = True
    close = client_frame(0x8, CLOSE_GOING_AWAY.to_bytes(2, "big"))
    h.session.data_received(client_frame(0x2, b"x" * 300) + close[:3], 1.0)
    assert h.take() == [] and h.messages == []
    h.session.data_received(close[3:], 2.0)
    assert [type(a) for a in h.take()] == [Leaving, Finish] and h.messages == [b"x" * 300]


def test_a_close_behind_a_held_fragmented_message_is_found() -> None:
    h = Harness()
    h.session.write_paused = True
    close = client_frame(0x8, CLOSE_GOING_AWAY.to_bytes(2, "big"))
    first = client_frame(0x2, b"ab", fin=False)
    ping = client_frame(0x9, b"p")  # a control frame between the fragments
    h.session.data_received(first + ping + client_frame(0x0, b"cd") + close, 1.0)
    kinds = [type(a) for a in h.take()]
    # The pong is still emitted; the adapter, told Leaving, writes nothing.
    assert kinds == [Leaving, Send, Finish] and h.messages == [b"abcd"]


def test_an_end_of_stream_behind_held_messages_handles_them() -> None:
    h = Harness()
    h.session.write_paused = True
    h.feed(b"a")
    h.session.eof_received()
    assert h.messages == [b"a"] and h.session.closing


def test_closing_reads_on_for_the_peers_close_whatever_held_reading() -> None:
    h = Harness()
    h.session.hold()
    h.take()
    h.session.close(CLOSE_GOING_AWAY, "bye")
    (close,) = h.take()
    assert isinstance(close, Close) and close.await_peer
    assert not h.session.held
    h.session.hold()  # a hold once closing does not stop reading the close
    assert h.take() == [] and not h.session.held
    h.session.data_received(client_frame(0x8, CLOSE_GOING_AWAY.to_bytes(2, "big")), 2.0)
    (finish,) = h.take()
    assert isinstance(finish, Finish) and finish.data == b""  # our close was first
    h.session.release()
    h.session.release()
    assert h.take() == []


def test_keepalive_pings_after_silence_and_closes_1011_after_as_long_again() -> None:
    h = Harness()
    assert h.session.keepalive_due == PING_S
    assert h.session.keepalive(PING_S, PING_S) == 2 * PING_S
    (ping,) = h.take()
    assert isinstance(ping, Send) and parse_frame(bytearray(ping.data)) == (0x9, b"")
    assert h.session.keepalive(2 * PING_S, 2 * PING_S) is None
    (close,) = h.take()
    assert isinstance(close, Close)
    assert parse_frame(bytearray(close.data)) == (
        0x8,
        CLOSE_INTERNAL_ERROR.to_bytes(2, "big") + b"keepalive ping timeout",
    )


def test_keepalive_judges_no_silence_while_the_session_holds_reading() -> None:
    """Held, we read nothing: the peer's pong would wait unread in the socket."""
    h = Harness()
    h.session.hold()
    h.take()
    assert h.session.keepalive(PING_S, PING_S) == 2 * PING_S
    assert h.session.keepalive(3 * PING_S, 2 * PING_S) == 4 * PING_S
    assert h.take() == []  # neither a ping nor a close
    h.session.release()
    h.take()
    # Reading again: silent for as long as the interval from the last held
    # judgement on, the peer is pinged, then closed.
    assert h.session.keepalive(4 * PING_S, 4 * PING_S) == 5 * PING_S
    (ping,) = h.take()
    assert isinstance(ping, Send) and parse_frame(bytearray(ping.data)) == (0x9, b"")
    assert h.session.keepalive(5 * PING_S, 5 * PING_S) is None
    (close,) = h.take()
    assert isinstance(close, Close)


def test_resume_must_be_below_the_limit() -> None:
    with pytest.raises(ValueError):
        BaseSession(
            lambda action: None,
            lambda message: None,
            max_message_bytes=1,
            ping_s=1.0,
            now=0.0,
            max_inflight=2,
            resume_inflight=2,
        )
