"""What every WebSocket connection's I/O is: the socket, the timers, the close
handshake, backpressure and the connection gauge. Every socket runs on it:
native (:mod:`syncd.ws.connection`), y-websocket and Hocuspocus
(:mod:`syncd.yjs.connection`).

Theory of operation
-------------------
The HTTP connection hands its transport over with the bytes it had already
read; from then on a :class:`BaseConnection` subclass is the transport's
protocol. It is the adapter around a sans-I/O
:class:`~syncd.ws.base_session.BaseSession`, as hypercorn's TCP server is
around its protocols: bytes read and the clock go into the session, and the
actions it emits are carried out here; a subclass carries out its protocol's
own actions (:meth:`BaseConnection._act`) and says what its subscribers do on
a drain, at an expiry and when the connection is lost.

- ``Send``: written at once (:meth:`BaseConnection.send`; a subclass that
  queues broadcast frames for a flusher sends behind them, so the peer sees
  everything in the order it was produced).
- ``PauseReading`` / ``ResumeReading``: the session's read backpressure.
- ``Close`` / ``Finish``: the closing handshake. When we close (1009,
  shutdown's 1001, keepalive's 1011, a protocol's own codes) we send our close
  frame and wait up to :data:`CLOSE_TIMEOUT_S` for the peer's; when the peer
  closes first we answer and close the transport. A transport that will not
  finish closing is aborted after the same timeout. Once closing has started
  nothing but close frames goes out (:attr:`BaseConnection.can_send`).

Timers: one keepalive timer per connection, re-armed for the time the
session names; one expiry timer, set to the earliest time the subclass names
(:meth:`BaseConnection._expiry_due_ms`: when a token or a rule that grants a
read ends) and re-armed with :meth:`BaseConnection._arm_expiry` when that
changes; and the close timeout. The first two are entries in the wheels
every connection of an endpoint shares (:class:`ConnectionTimers`, see
:mod:`syncd.http.timers`), not loop timers of their own: an idle connection
has both for its whole life, and as loop timers they were a third of its
memory. A keepalive fires at most 1/16 of the ping interval late, an expiry
at most a second late (nothing is sent past the end meanwhile: see the
subclasses); the close timeout is a loop timer, as closing is brief.

Backpressure: the transport's high-water mark is the subscriber bound
(``SERVICE_SUBSCRIBER_BUFFER_BYTES``). While it is over it, the session
handles no message of the peer's; while the session holds reading (requests
in flight at its limit, a hold) we stop reading from the peer. A peer held
back for not reading ours is still read, up to :data:`HELD_READ_BYTES` of
messages left unhandled (then the transport stops reading too), so that its
close is seen: a close frame in what was read ends the hold (nothing more
goes out, so nothing is held back for it: the messages before the close are
handled, then the close answered, the subscriptions end at once, and what is
still being written gets the close timeout), and so does its end of stream.
A peer that closes while reading nothing of ours is not kept until it reads
(or until the keepalive gives up on it). When the transport drains,
what ended meanwhile ends first (a fresh state would carry what was made
after the end, and the timer may not have had its turn yet), then the
subclass sends what its subscribers skipped (:meth:`BaseConnection._drained`),
then the session handles what it held back.

A whole state for a joining peer (:meth:`BaseConnection.feed`: a Yjs step 2,
a snapshot frame) is the same shared object for every peer that joins that
version (:mod:`syncd.shared_states`). It is written in slices as the
transport drains (:class:`~syncd.http.feed.Feed`), its frame header first;
while it goes out, the transport's pauses are the feed's, not the
subscribers': everything sent meanwhile (deltas, answers, pings, a close
frame) waits behind it in order, and the peer's messages are still read.
What waits there is the connection's own memory, so it is bounded by the
subscriber bound too: past it the connection counts as paused, as a
transport over its mark does (subscribers skip and resync once it drains,
the session handles no message, reading stops), until the feed is out and
the transport has drained. A second state fed while one is still going out
is held for this peer alone, and is not counted there: from then on the
session handles no message and reading stops until the feed is out (a peer
that reads nothing would otherwise make us hold a whole state per
subscribe); as over the transport's mark, the keepalive still judges the
peer, what it takes counting as life, and its close is read. A closing
handshake waits for the feed (a frame cannot be cut), within the close
timeout.

Every connection counts in ``service_ws_connections_active`` and in the
server's connection count (``SERVICE_MAX_CONNECTIONS``, and shutdown closes
it with 1001) while it is open.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from syncd.http.feed import FEED_SLICE_BYTES, Feed, Piece
from syncd.http.timers import EXPIRY_RESOLUTION_S, INTERVAL_SLOTS, Slot, Wheel
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
from syncd.ws.framing import CLOSE_GOING_AWAY

if TYPE_CHECKING:
    from syncd.auth.authenticator import Authenticator
    from syncd.http.protocol import ServerContext
    from syncd.metrics import Metrics

CLOSE_TIMEOUT_S: Final = 5.0
"""How long we wait for the peer's close frame after sending ours, and for a
closing transport to flush, before dropping the connection: long enough for a
live client on a slow link, short enough that dead peers do not pile up."""

HELD_READ_BYTES: Final = 64 * 1024
"""What we read on from a peer whose messages we hold back because it reads
nothing of ours (and leave unhandled), looking for its close frame: past it
we stop reading the socket. A close behind more than this of its messages
waits, as all of it did before; the bound keeps a stalled peer that writes
on from costing more than this (and one read of the transport)."""

LOW_WATER_DIVISOR: Final = 4
"""The transport's low-water mark is the subscriber bound over this: a drained
connection has room for a whole state and the updates that follow it."""


class ConnectionTimers:
    """The keepalive and expiry wheels the connections of an endpoint share."""

    __slots__ = ("expiry", "keepalive")

    def __init__(self, ping_s: float) -> None:
        self.keepalive: Wheel[BaseConnection] = Wheel(ping_s / INTERVAL_SLOTS, _keepalive_due)
        self.expiry: Wheel[BaseConnection] = Wheel(EXPIRY_RESOLUTION_S, _expiry_due)


def _keepalive_due(connection: BaseConnection) -> None:
    connection._on_keepalive()


def _expiry_due(connection: BaseConnection) -> None:
    connection._on_expiry()


class BaseConnection(asyncio.Protocol):
    # One per open connection, and subclasses too: slots keep an idle one small.
    __slots__ = (
        "_auth",
        "_expiring",
        "_expiry",
        "_expiry_due",
        "_feed",
        "_feed_holds_reading",
        "_gone",
        "_keepalive",
        "_keepalive_due",
        "_loop",
        "_metrics",
        "_read_held",
        "_read_paused",
        "_server",
        "_timer",
        "_timers",
        "_write_paused",
        "can_send",
        "session",
        "transport",
    )

    def __init__(
        self,
        transport: asyncio.Transport,
        session: BaseSession,
        trailing: bytes,
        *,
        bound: int,
        auth: Authenticator,
        metrics: Metrics,
        server: Callable[[], ServerContext | None],
        timers: ConnectionTimers,
    ) -> None:
        """``session`` emits to this connection's :meth:`_do`; ``bound`` is the
        subscriber bound; ``server`` the HTTP server's shared state, once it
        runs; ``timers`` the endpoint's shared wheels."""
        self._loop = loop = asyncio.get_running_loop()
        self._timers = timers
        self.transport = transport
        self.session = session
        self._auth = auth
        self._metrics = metrics
        self._server = server
        self.can_send = True
        """False once closing started: then nothing but close frames go out."""
        self._read_paused = False
        """The transport is not reading."""
        self._read_held = False
        """The session handles no message because the peer reads nothing of
        ours: the transport reads on up to :data:`HELD_READ_BYTES` unhandled,
        so its close is seen (see the module docstring)."""
        self._write_paused = False
        self._gone = False
        self._feed: Feed | None = None
        """What is still to be written from a shared state on (None: nothing)."""
        self._feed_holds_reading = False
        """A state was queued behind another still going out: the session
        handles no message until the feed is out (see :meth:`feed`)."""
        self._timer: asyncio.TimerHandle | None = None
        self._keepalive: Slot[BaseConnection] | None = None
        self._keepalive_due = 0.0
        self._arm_keepalive(session.keepalive_due)
        self._expiry: Slot[BaseConnection] | None = None
        self._expiry_due: int | None = None
        """What the expiry timer is set for (None: not set)."""
        self._expiring = False
        """An expiry is being handled: re-arm once after it, not per change."""
        transport.set_write_buffer_limits(high=bound, low=bound // LOW_WATER_DIVISOR)
        ctx = server()
        if ctx is not None:
            ctx.other_connections.add(self)
        metrics.ws_connections_active.inc()
        if trailing:
            # Parsed on the next loop pass, once the transport is ours and the
            # subclass is set up; bytes that arrive before then queue behind
            # these in the frame layer.
            session.feed(trailing)
            loop.call_soon(session.process)

    # -- what subclasses provide -----------------------------------------------

    def _act(self, action: Action) -> None:
        """Carry out an action of the protocol's own."""
        raise NotImplementedError(type(action).__name__)

    def _expiry_due_ms(self) -> int | None:
        """When (wall-clock ms, the authenticator's clock) something this
        connection holds ends: the expiry timer calls :meth:`_expire` then."""
        return None

    def _expire(self) -> None:
        """The expiry timer fired: end what has ended, by the clock."""

    def _drained(self) -> None:
        """The transport drained: send what was skipped meanwhile."""

    def _feed_out(self) -> None:
        """The feed is all written and the transport is under its mark: what
        :meth:`_drained` left for the feed to go out first may go now."""

    def _closing(self) -> None:
        """Closing started (ours or the peer's): nothing more goes out (what
        was queued went before our close frame, see :meth:`flush`)."""

    def _lost(self) -> None:
        """The connection is gone (after the shared bookkeeping)."""

    # -- asyncio.Protocol -------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Not called: the transport is handed over already connected."""

    def data_received(self, data: bytes) -> None:
        session = self.session
        session.data_received(data, self._loop.time())
        if self._read_held and session.unread > HELD_READ_BYTES:
            self._pause_reading()

    def eof_received(self) -> bool | None:
        # The peer will send nothing more, not even a close frame: done. What
        # it sent is still handled (the session does), nothing goes out, and
        # what is still being written gets the close timeout, as after a close.
        self._stop_sending()
        self.session.eof_received()
        self._arm_timer()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._gone:
            return
        self._gone = True
        self.can_send = False
        self.session.connection_lost()
        feed = self._feed
        if feed is not None:
            self._feed = None
            feed.clear()
        self._cancel_timer()
        self._stop_keepalive()
        self._stop_expiry()
        ctx = self._server()
        if ctx is not None:
            ctx.other_connections.discard(self)
        self._metrics.ws_connections_active.dec()
        self._lost()

    def pause_writing(self) -> None:
        feed = self._feed
        if feed is not None:
            feed.waiting = True  # the feed's pause: what is sent meanwhile queues behind it
            return
        self._hold_output()

    def resume_writing(self) -> None:
        self.session.output_taken(self._loop.time())
        feed = self._feed
        if feed is not None:
            feed.waiting = False
            self._pump()
            return
        self._write_paused = False
        due = self._expiry_due
        if due is not None and self._auth.now_ms() >= due:
            self._on_expiry()  # see the module docstring: what ended ends first
        self._drained()
        if self._write_paused:
            return  # what the drain sent filled it again: the next resume goes on
        self.session.writing_resumed()
        self._maybe_resume_reading()

    # -- the session's actions ----------------------------------------------

    def _do(self, action: Action) -> None:
        if isinstance(action, Send):
            self.send(action.data)
        elif isinstance(action, PauseReading):
            self._pause_reading()
        elif isinstance(action, ResumeReading):
            self._maybe_resume_reading()
        elif isinstance(action, Close):
            self._close(action)
        elif isinstance(action, Finish):
            self._peer_closed(action.data)
        elif isinstance(action, Leaving):
            self._stop_sending()
        else:
            self._act(action)

    # -- output ------------------------------------------------------------

    @property
    def write_paused(self) -> bool:
        """The peer has left more than the bound unread (and not yet drained
        to the low-water mark), known without asking the transport per write."""
        return self._write_paused

    def send(self, data: bytes) -> None:
        """Write now (nothing once closing has started)."""
        if self.can_send:
            self._write(data)

    def feed(self, head: bytes, state: bytes | bytearray) -> None:
        """Write ``head`` then ``state`` (a whole state, usually a
        :class:`~syncd.shared_states.SharedState` other connections write too),
        after everything sent before; a large ``state`` in slices as the
        transport drains, and what is sent meanwhile behind it (see the module
        docstring). ``head`` frames it: a WebSocket frame header, and what
        precedes the state in the frame's payload."""
        if not self.can_send:
            return
        if len(state) < FEED_SLICE_BYTES and self._feed is None:
            self.send(head + bytes(state))  # small: as any message
            return
        self.flush()  # what a subclass queued was sent first
        feed = self._feed
        if feed is None:
            feed = self._feed = Feed()
            # Over the bound already (no feed was running): wait for the drain.
            feed.waiting = self._write_paused
        elif not self._feed_holds_reading:
            # A state still going out, and this one behind it: held for this
            # peer alone until it reads the first. Its bytes are not counted
            # as our own, so handling more messages (subscribes to other
            # large CRDTs, or to one a writer changes between them) would
            # queue a whole state each, without bound: none until it is out.
            # As for a transport over its mark (not a session hold: the
            # keepalive still judges a peer that takes nothing of it).
            self._feed_holds_reading = True
            self.session.write_paused = True
            self._hold_reading()
        feed.add(head)
        feed.add_shared(state)
        self._pump()

    def flush(self) -> None:
        """Write what a subclass queued (before our close frame)."""

    # -- closing -------------------------------------------------------------

    def shutdown(self) -> None:
        """The server is stopping: close with 1001 (going away)."""
        self.close(CLOSE_GOING_AWAY, "server shutting down")

    def close(self, code: int, reason: str = "") -> None:
        if not self._gone:
            self.session.close(code, reason)

    def _close(self, action: Close) -> None:
        self.flush()  # what was queued goes before the close frame
        self.can_send = False
        self._stop_keepalive()
        self._stop_expiry()
        self._closing()
        if action.data:
            self._write(action.data)
        if action.await_peer:
            self._read_held = False
            self._resume_reading()  # whatever held it back: the peer's answer
            self._arm_timer()
        else:
            self._finish()

    def _stop_sending(self) -> None:
        """The peer is leaving (its close frame is read, or its end of
        stream): nothing more goes out but our answer to its close."""
        self.can_send = False
        self._stop_keepalive()
        self._stop_expiry()
        self._closing()

    def _peer_closed(self, answer: bytes) -> None:
        self._stop_sending()  # the peer is leaving: no data after its close
        if answer:
            self._write(answer)
        self._finish()

    def _finish(self) -> None:
        """Close the transport (after its buffer flushes), aborting if that stalls."""
        self.can_send = False
        feed = self._feed
        if feed is not None:
            feed.close_after = True  # once the feed is out: a frame cannot be cut
            self._arm_timer()
            return
        if not self.transport.is_closing():
            self.transport.close()
        self._arm_timer()

    def _arm_timer(self) -> None:
        if self._timer is None and not self._gone:
            self._timer = self._loop.call_later(CLOSE_TIMEOUT_S, self._abort)

    def _abort(self) -> None:
        self._timer = None
        if not self._gone:
            self.transport.abort()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- keepalive -----------------------------------------------------------

    def _on_keepalive(self) -> None:
        self._keepalive = None
        if self._gone or not self.can_send:
            return
        due = self.session.keepalive(self._loop.time(), self._keepalive_due)
        if due is not None and self.can_send:
            self._arm_keepalive(due)

    def _arm_keepalive(self, due: float) -> None:
        self._keepalive_due = due
        self._keepalive = self._timers.keepalive.add(due, self)

    def _stop_keepalive(self) -> None:
        if self._keepalive is not None:
            self._timers.keepalive.remove(self._keepalive, self)
            self._keepalive = None

    # -- expiry --------------------------------------------------------------

    def _arm_expiry(self) -> None:
        """Set the expiry timer for what the subclass now names, unless it is
        set for that already (the usual case: every read ends with the token)."""
        due = self._expiry_due_ms()
        if due == self._expiry_due:
            return
        self._stop_expiry()
        if due is None or self._gone:
            return
        self._expiry_due = due
        when = self._loop.time() + self._auth.seconds_until(due)
        self._expiry = self._timers.expiry.add(when, self)

    def _on_expiry(self) -> None:
        self._stop_expiry()
        if self._gone:
            return
        # One re-arm after all of it, not one per subscription it ends.
        self._expiring = True
        try:
            self._expire()
        finally:
            self._expiring = False
        self._arm_expiry()

    def _stop_expiry(self) -> None:
        self._expiry_due = None
        if self._expiry is not None:
            self._timers.expiry.remove(self._expiry, self)
            self._expiry = None

    # -- plumbing ----------------------------------------------------------

    def _write(self, data: bytes) -> None:
        feed = self._feed
        if feed is not None:
            feed.add(data)
            if (
                not self._write_paused
                and feed.own_bytes > self.transport.get_write_buffer_limits()[1]
            ):
                self._hold_output()  # the bound: as a transport over its mark
            return
        self._write_now(data)

    def _write_now(self, data: Piece) -> None:
        try:
            self.transport.write(data)
        except RuntimeError:
            # uvloop refuses writes once the socket failed, a moment before
            # connection_lost reaches us; nothing more can be sent.
            self.can_send = False

    def _feed_waits(self) -> bool:
        feed = self._feed
        return feed is None or feed.waiting or self._gone

    def _pump(self) -> None:
        """Write what the feed holds while the transport takes it; once all of
        it is out, the connection is as any other: paused if the transport
        still is, else resumed if it was held meanwhile."""
        feed = self._feed
        if feed is None or not feed.pump(self._write_now, self._feed_waits):
            return
        self._feed = None
        if feed.close_after:
            self._finish()
        elif feed.waiting:
            self._hold_output()  # its resume_writing carries on as for any pause
        elif self._write_paused:
            self.resume_writing()  # held at the bound, or paused before the feed
        else:
            self._feed_out()
        if self._feed_holds_reading:
            self._feed_holds_reading = False
            if not self._write_paused and self.session.write_paused:
                self.session.writing_resumed()  # handles what waited
                self._maybe_resume_reading()

    def _hold_output(self) -> None:
        """The peer has enough unread: subscribers skip, the session handles no
        message (until :meth:`resume_writing`), reading is held. Once closing,
        nothing more is written: nothing to hold messages back for."""
        self._write_paused = True
        if self.can_send:
            self.session.write_paused = True
            self._hold_reading()

    def _hold_reading(self) -> None:
        """Messages are held back for the peer's not reading: read on for its
        close, up to the bound (see :data:`HELD_READ_BYTES`)."""
        self._read_held = True
        if self.session.unread > HELD_READ_BYTES:
            self._pause_reading()

    def _pause_reading(self) -> None:
        if not self._read_paused and not self._gone:
            self._read_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._read_paused and not self._gone:
            self._read_paused = False
            self.transport.resume_reading()

    def _maybe_resume_reading(self) -> None:
        if not self._write_paused and not self._feed_holds_reading:
            self._read_held = False
            if not self.session.held:
                self._resume_reading()
