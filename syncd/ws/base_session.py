"""What every WebSocket session is, without I/O: frames, keepalive, the close
handshake and read backpressure. Every socket runs on it: the native protocol
(:mod:`syncd.ws.session`), y-websocket and Hocuspocus (:mod:`syncd.yjs.connection`).

Theory of operation
-------------------
A :class:`BaseSession` is the state of one WebSocket connection after the
upgrade, in the manner of h11 and wsproto: it never touches a socket, a timer
or a task. Its adapter (:class:`~syncd.ws.base_connection.BaseConnection`)
feeds it what happened (bytes read, the clock, the transport's backpressure)
and carries out the :class:`Action` objects the session hands to the injected
``emit`` callable, in the order given. What a whole message means is the
protocol's: each goes to its ``receiver``'s ``on_message`` (the native
session is its own receiver; a Yjs socket receives for its document channels),
which may emit actions of its own through the same ``emit``.

The actions every session emits are defined here, once; a protocol adds its
own as subclasses of :class:`Action`:

- :class:`Send`: bytes for the peer, in order behind anything queued. At the
  WebSocket layer these are whole frames; a protocol on top that sends
  through a layer of its own says what its ``Send`` carries (a Yjs document's
  session: one y-protocols message, which the socket frames);
- :class:`PauseReading` / :class:`ResumeReading`: stop reading the socket, or
  read on (see backpressure below);
- :class:`Close`: send our close frame; then read on for the peer's close
  when ``await_peer``, else close the transport;
- :class:`Leaving`: the peer's close frame came while its messages were held
  back for its not reading ours: send nothing more (the messages before it
  are handled, then a :class:`Finish` answers it);
- :class:`Finish`: the closing handshake is over (after ``data``, if any):
  close the transport.

Because ``emit`` runs each action before the session goes on, what the
adapter learns while doing it (the transport pausing writes) reaches the
session between two messages, as it would in one piece of code.

Keepalive (:meth:`BaseSession.keepalive`, called by the adapter's one timer at
the time it last returned): a peer silent for the ping interval gets a
protocol ping; if nothing at all arrives for as long again, we close with
1011. Any bytes count as life, so a busy client is never pinged. A timer that
fires late (the loop was stalled) judges again after a while instead: the
pong may be unread in the socket. So may it while the session holds reading
(its own backpressure): that time counts as life too. And the peer cannot
answer a ping still queued behind what it is reading (a large snapshot on a
slow link): each drain of our output (:meth:`BaseSession.output_taken`)
counts as life as well.

Closing: :meth:`BaseSession.close` starts the handshake (shutdown's 1001,
keepalive's 1011, a protocol's own codes); the peer's close frame is answered
and ends it; a protocol violation the frame layer finds closes with its code
(1002, 1007: the stream is beyond repair, so the transport closes at once), a
message over the size limit with 1009 (reading on, dropping data, for the
peer's close).

Read backpressure: reading stops while ``max_inflight`` of the protocol's
requests await their outcome (``inflight``, which the protocol counts:
native op messages, Yjs updates) or while anything :meth:`holds
<BaseSession.hold>` it (a Yjs update waiting for the rate limit, a document
loading), and resumes once at most ``resume_inflight`` remain and nothing
holds it, so it does not flap per request. While the adapter's transport
cannot write (``write_paused``: the peer is not reading what we send), no
further message is handled either: answering them would buffer without
bound; :meth:`BaseSession.writing_resumed` carries on. Bytes that arrive
meanwhile wait in the frame layer (the adapter reads on up to a bound, then
stops reading the socket), and are looked through for the peer's close
frame: once it is there the peer is leaving, nothing more goes out
(:class:`Leaving`), so nothing holds its messages back any more: those before
the close are handled, then the close is answered. Its end of stream does the
same (without an answer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol, cast

from syncd.ws.framing import (
    CLOSE_INTERNAL_ERROR,
    Failed,
    FrameLayer,
    Message,
    PeerClosed,
    Reply,
)

KEEPALIVE_LATE_SHARE: Final = 0.25
"""A keepalive timer that fires later than this share of the ping interval
found the loop stalled, not the peer silent: it looks again after as long."""


# -- actions ---------------------------------------------------------------


class Action:
    """Something a session asks its adapter to do; one subclass per kind."""

    __slots__ = ()


@dataclass(slots=True)
class Send(Action):
    data: bytes
    """Bytes for the peer (see the module docstring for what they are)."""


@dataclass(slots=True)
class PauseReading(Action):
    pass


@dataclass(slots=True)
class ResumeReading(Action):
    pass


@dataclass(slots=True)
class Close(Action):
    data: bytes
    """Our close frame (empty if the frame layer had already closed)."""
    await_peer: bool
    """Read on for the peer's close frame; else close the transport."""


@dataclass(slots=True)
class Leaving(Action):
    """The peer's close frame came while its messages were held back for its
    not reading ours: from now on nothing goes out but the answer to its
    close (a :class:`Finish`, once the messages before it are handled)."""


@dataclass(slots=True)
class Finish(Action):
    data: bytes
    """Our answer to the peer's close frame (may be empty), sent first."""


_PAUSE: Final = PauseReading()
_RESUME: Final = ResumeReading()
_LEAVING: Final = Leaving()


class Receiver(Protocol):
    """The protocol above the session: what a whole message means."""

    def on_message(self, data: bytes | str) -> None:
        """One whole message: ``bytes`` (binary) or ``str`` (text)."""
        ...


# -- the session -------------------------------------------------------------


class BaseSession:
    # One per open connection: slots keep an idle connection small.
    __slots__ = (
        "_emit",
        "_frames",
        "_gone",
        "_holds",
        "_last_read",
        "_max_inflight",
        "_ping_s",
        "_ping_sent",
        "_pinged",
        "_receiver",
        "_resume_inflight",
        "closing",
        "held",
        "inflight",
        "write_paused",
    )

    def __init__(
        self,
        emit: Callable[[Action], None],
        receiver: Receiver,
        *,
        max_message_bytes: int,
        ping_s: float,
        now: float,
        max_inflight: int,
        resume_inflight: int,
    ) -> None:
        if not 0 <= resume_inflight < max_inflight:
            raise ValueError("resume_inflight must be below max_inflight")
        self._emit = emit
        self._receiver = receiver
        """What a whole message means: the protocol above (an object, not a
        bound method: one fewer object per connection)."""
        self._frames = FrameLayer(max_message_bytes)
        self._max_inflight = max_inflight
        self._resume_inflight = resume_inflight
        self.inflight = 0
        """The protocol's requests awaiting their outcome (it counts them)."""
        self._holds = 0
        """Unmatched :meth:`hold` calls."""
        self.held = False
        """Reading stopped: ``max_inflight`` requests in flight, or held."""
        self.write_paused = False
        """Set by the adapter: the peer is not reading what we send."""
        self.closing = False
        """Closing started (ours or the peer's), or the connection is gone."""
        self._gone = False
        self._ping_s = ping_s
        self._last_read = now
        self._pinged = False
        self._ping_sent = 0.0

    @property
    def keepalive_due(self) -> float:
        """When the adapter's timer should first call :meth:`keepalive`."""
        return self._last_read + self._ping_s

    # -- input ---------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Buffer ``data`` without handling it yet (call :meth:`process`)."""
        self._frames.feed(data)

    def data_received(self, data: bytes, now: float) -> None:
        self._last_read = now
        frames = self._frames
        if not frames.reading:
            return
        frames.feed(data)
        if self.write_paused and not self.closing and frames.close_ahead():
            self._leaving()
        self.process()

    @property
    def unread(self) -> int:
        """Bytes read from the peer and not yet handled."""
        return self._frames.unread

    @property
    def handling(self) -> bool:
        """Whether messages may be handled now: nothing holds them back (see
        the module docstring; once closing nothing goes out, so a peer not
        reading holds nothing back)."""
        return not self._gone and not self.held and (not self.write_paused or self.closing)

    def process(self) -> None:
        """Handle what is buffered, as far as backpressure allows."""
        if self.handling:
            self._read_events()

    def eof_received(self) -> None:
        """The peer will send nothing more, not even a close frame: what it
        sent is handled (nothing more goes out)."""
        self.closing = True
        self.write_paused = False
        self.process()

    def _leaving(self) -> None:
        """The peer's close frame is among what waits unhandled while it reads
        nothing of ours: it is leaving. Nothing more goes out (the adapter
        stops sending), so what it sent before its close is handled now,
        without waiting for it to read (its ops are applied), then its close."""
        self.closing = True
        self.write_paused = False
        self._emit(_LEAVING)

    def writing_resumed(self) -> None:
        self.write_paused = False
        self.process()  # messages held back while paused

    def output_taken(self, now: float) -> None:
        """The peer took what we had queued for it (the transport drained):
        it is alive and reading, even if it sends nothing. Counted as a read
        by the keepalive: our ping waits behind what it is still taking (a
        large snapshot on a slow link), so it cannot answer sooner, and
        judged silent it would be closed before the snapshot ends, on every
        reconnect."""
        self._last_read = now

    def connection_lost(self) -> None:
        """The connection is gone: nothing more goes out. Idempotent."""
        self._gone = True
        self.closing = True
        self.inflight = 0

    # -- read backpressure -----------------------------------------------------

    def started(self) -> None:
        """A request of the peer's now awaits its outcome (reading stops at
        ``max_inflight``, once the message that made it is handled)."""
        self.inflight += 1

    def settled(self) -> None:
        """A request counted by :meth:`started` is done."""
        if self._gone:
            return
        self.inflight -= 1
        self._resume_if_due()

    def hold(self) -> None:
        """Stop reading until a matching :meth:`release` (reading on for the
        peer's close frame once closing has started)."""
        self._holds += 1
        if not self.held and not self.closing:
            self.held = True
            self._emit(_PAUSE)

    def release(self) -> None:
        self._holds -= 1
        self._resume_if_due()

    def _resume_if_due(self) -> None:
        """Read on, handling what waited first, once few enough requests are
        in flight and nothing holds reading."""
        if self.held and not self._holds and self.inflight <= self._resume_inflight:
            self.held = False
            self.process()
            if not self.held:
                self._emit(_RESUME)

    # -- output we start -----------------------------------------------------

    def close(self, code: int, reason: str = "") -> None:
        """Start the closing handshake: our close frame, then the peer's."""
        if self._gone:
            return
        self.closing = True
        data = self._frames.close(code, reason)
        reading = self._frames.reading
        if reading:
            self.held = False  # read on, whatever held reading back
        self._emit(Close(data, reading))

    def keepalive(self, now: float, due: float) -> float | None:
        """The keepalive timer set for ``due`` fired at ``now``: ping, close,
        or nothing; returns when to call again (None: never)."""
        if self._gone or self.closing:
            return None
        if self.held:
            # We stopped reading (requests in flight at the limit, a hold):
            # whatever the peer sent, its pong too, waits unread in the
            # socket. The silence is ours, not the peer's: it counts as life,
            # and the peer is judged from when we read again.
            self._last_read = now
            self._pinged = False
            return now + self._ping_s
        if self._pinged:
            if self._last_read >= self._ping_sent:
                self._pinged = False  # anything read since the ping answers it
            elif now - due > self._ping_s * KEEPALIVE_LATE_SHARE:
                # The loop was stalled past the deadline: the pong may be waiting
                # unread in the socket. Judge again once reads have had a turn.
                return now + self._ping_s * KEEPALIVE_LATE_SHARE
            else:
                self.close(CLOSE_INTERNAL_ERROR, "keepalive ping timeout")
                return None
        quiet_until = self._last_read + self._ping_s
        if now < quiet_until:
            return quiet_until
        self._pinged = True
        self._ping_sent = now
        ping = self._frames.ping()
        if ping:
            self._emit(Send(ping))
        return now + self._ping_s

    # -- internals ---------------------------------------------------------------

    def _read_events(self) -> None:
        for event in self._frames.events():
            kind = type(event)
            if kind is Message:
                self._receiver.on_message(cast(Message, event).data)
                if self.inflight >= self._max_inflight:
                    if not self.held:
                        self.held = True
                        self._emit(_PAUSE)
                    return
                if self.held or (self.write_paused and not self.closing) or self._gone:
                    # (``not self.handling``, inline: once per message.)
                    # Held by the message itself, or the peer is not reading:
                    # answering the rest of what it sent (a native subscribe
                    # is a whole snapshot) would buffer without bound.
                    # writing_resumed() and release() carry on.
                    return
            elif kind is Reply:
                self._emit(Send(cast(Reply, event).data))
                if not self.handling:
                    return
            elif kind is PeerClosed:
                self.closing = True
                self._emit(Finish(self._frames.answer_close(cast(PeerClosed, event))))
                return
            else:
                failed = cast(Failed, event)
                self.close(failed.code, failed.reason)
                if self._frames.reading:
                    # Over-size only: read on (dropping data) for the peer's close.
                    self._read_events()
                return
