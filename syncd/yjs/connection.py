"""The socket side of Yjs connections: y-websocket's, and the base Hocuspocus's
builds on.

Theory of operation
-------------------
:class:`YjsSocket` owns what every Yjs connection has once the HTTP upgrade
handed its transport over: the frame layer (:mod:`syncd.ws.framing`), the
keepalive timer, the closing handshake, backpressure, and the count of
updates awaiting the store. Each whole message goes to :meth:`on_message`;
the documents themselves are :class:`~syncd.yjs.channel.YjsChannel`s,
which call back through the channel ``Owner`` protocol implemented here.

:class:`YjsConnection` is the y-websocket protocol: one document per
connection, its messages the channel's messages as they are.

Expiry: one timer per connection, set to the earliest end of a channel's
read (its token's expiry, or earlier the end of the rules that grant it) and
re-armed when channels come and go, closes the connection then: 4401
(:data:`CLOSE_TOKEN_EXPIRED`) when a token expired, 4403
(:data:`CLOSE_READ_EXPIRED`) when only a rule did. Providers reconnect and
authenticate again, with a new token if they have one.

Backpressure: while the transport's buffer is over the subscriber bound,
deltas are not queued; once it drains, each channel that skipped some sends
the whole document as one update (Yjs merges what it has). Reading stops
while :data:`MAX_INFLIGHT_UPDATES` of the peer's updates await the store, and
while an update waits for the token's rate limit.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Final

from syncd.auth.authenticator import NO_END_MS, TOKEN_EXPIRED_MESSAGE
from syncd.hub import EncodedDelta
from syncd.wire import WS_OPCODE_BINARY, ws_frame
from syncd.ws.connection import CLOSE_TIMEOUT_S
from syncd.ws.framing import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL_ERROR,
    CLOSE_READ_EXPIRED,
    CLOSE_TOKEN_EXPIRED,
    Failed,
    FrameLayer,
    Message,
    PeerClosed,
    Reply,
)
from syncd.yjs.channel import YjsChannel, YjsContext, update_of
from syncd.yjs.protocol import permission_denied, sync_update

if TYPE_CHECKING:
    from syncd.auth.authenticator import Principal

MAX_INFLIGHT_UPDATES: Final = 256
"""A peer's updates awaiting the store before we stop reading its socket: a
provider sends one per edit, so this is a burst, not a steady state."""


def _update_frame(delta: dict[str, Any]) -> bytes:
    """A delta as a y-websocket update message in a binary frame."""
    update = update_of(delta)
    return ws_frame(WS_OPCODE_BINARY, sync_update(update)) if update else b""


class YjsSocket(asyncio.Protocol):
    """The shared socket adapter; subclasses say what a message means."""

    def __init__(self, ctx: YjsContext, transport: asyncio.Transport) -> None:
        settings = ctx.settings
        self._ctx = ctx
        self._loop = loop = asyncio.get_running_loop()
        self.transport = transport
        self._frames = FrameLayer(settings.max_body_bytes)
        self._bound = settings.subscriber_buffer_bytes
        self._ping_s = settings.ws_ping_s
        self._inflight = 0
        self._holds = 0
        """Updates waiting for the token's rate limit: the socket is not read."""
        self._read_paused = False
        self._write_paused = False
        self._closing = False
        self._gone = False
        self._heard = True
        self._close_timer: asyncio.TimerHandle | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._expiry_due = NO_END_MS
        """What the expiry timer is set for (NO_END_MS: not set)."""
        self._keepalive: asyncio.TimerHandle | None = loop.call_later(self._ping_s, self._tick)
        transport.set_write_buffer_limits(high=self._bound, low=self._bound // 4)
        server = ctx.server()
        if server is not None:
            server.other_connections.add(self)
        ctx.metrics.ws_connections_active.inc()

    # -- what subclasses provide ---------------------------------------------

    def on_message(self, data: bytes | str) -> None:
        raise NotImplementedError

    def channels(self) -> list[YjsChannel]:
        raise NotImplementedError

    # -- asyncio.Protocol -------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Not called: the transport is handed over already connected."""

    def data_received(self, data: bytes) -> None:
        if self._gone:
            return
        self._heard = True
        frames = self._frames
        frames.feed(data)
        for event in frames.events():
            if isinstance(event, Message):
                if not self._closing:
                    self.on_message(event.data)
            elif isinstance(event, Reply):
                self._write(event.data)
            elif isinstance(event, PeerClosed):
                if not self._closing:
                    self._write(frames.answer_close(event))
                self._finish()
                return
            elif isinstance(event, Failed):
                self.close(event.code, event.reason)
                return
            if self._gone:
                return

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._gone:
            return
        self._gone = True
        self._closing = True
        for timer in (self._keepalive, self._close_timer):
            if timer is not None:
                timer.cancel()
        self._stop_expiry()
        for channel in self.channels():
            channel.leave()
        ctx = self._ctx
        server = ctx.server()
        if server is not None:
            server.other_connections.discard(self)
        ctx.metrics.ws_connections_active.dec()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        due = self._expiry_due
        if due != NO_END_MS and not self._closing and self._ctx.auth.now_ms() >= due:
            # The whole document would carry what was made after the end, and
            # the timer may not have had its turn yet: close first.
            self._on_expiry()
        if not self._closing:
            for channel in self.channels():
                channel.drained()

    # -- the channels' Owner -------------------------------------------------

    @property
    def write_paused(self) -> bool:
        return self._write_paused

    def update_started(self) -> None:
        self._inflight += 1
        if self._inflight >= MAX_INFLIGHT_UPDATES:
            self._pause_reading()

    def update_done(self, channel: YjsChannel, applied: bool) -> None:
        pass  # the acknowledgement, for protocols that have one (Hocuspocus)

    def update_finished(self) -> None:
        """An update that ``update_started`` counted is no longer in flight."""
        self._inflight -= 1
        self._maybe_resume_reading()

    def hold_reading(self, held: bool) -> None:
        if held:
            self._holds += 1
            self._pause_reading()
        else:
            self._holds -= 1
            self._maybe_resume_reading()

    def _pause_reading(self) -> None:
        if not self._read_paused and not self._gone:
            self._read_paused = True
            self.transport.pause_reading()

    def _maybe_resume_reading(self) -> None:
        if (
            self._read_paused
            and not self._gone
            and not self._holds
            and self._inflight <= MAX_INFLIGHT_UPDATES // 2
        ):
            self._read_paused = False
            self.transport.resume_reading()

    # -- output and closing --------------------------------------------------

    def _write(self, data: bytes) -> None:
        if not self._gone and not self.transport.is_closing():
            self.transport.write(data)

    def shutdown(self) -> None:
        """The server is stopping: close with 1001 (going away)."""
        self.close(CLOSE_GOING_AWAY, "server shutting down")

    def close(self, code: int, reason: str = "") -> None:
        if self._closing or self._gone:
            return
        self._closing = True
        self._stop_expiry()
        for channel in self.channels():
            channel.closed = True  # nothing more goes out for it
        if self._frames.open:
            self._write(self._frames.close(code, reason))
        self._close_timer = self._loop.call_later(CLOSE_TIMEOUT_S, self._finish)

    def _finish(self) -> None:
        self._closing = True
        if not self.transport.is_closing():
            self.transport.close()
        timer = self._close_timer
        if timer is not None:
            timer.cancel()
        self._close_timer = self._loop.call_later(CLOSE_TIMEOUT_S, self.transport.abort)

    # -- expiry ----------------------------------------------------------------

    def _arm_expiry(self) -> None:
        """Set the expiry timer for the earliest end of a channel's read, unless
        it is set for that already (call when channels come or go)."""
        due = min((channel.until for channel in self.channels()), default=NO_END_MS)
        if due == self._expiry_due:
            return
        self._stop_expiry()
        if due == NO_END_MS or self._closing or self._gone:
            return
        self._expiry_due = due
        delay = self._ctx.auth.seconds_until(due)
        self._expiry = self._loop.call_later(delay, self._on_expiry)

    def _on_expiry(self) -> None:
        self._stop_expiry()
        if self._closing or self._gone:
            return
        auth = self._ctx.auth
        now = auth.now_ms()
        for channel in self.channels():
            if channel.until <= now:
                expires_at = channel.principal.expires_at
                if expires_at is not None and now >= expires_at:
                    self.close(CLOSE_TOKEN_EXPIRED, TOKEN_EXPIRED_MESSAGE)
                else:
                    self.close(CLOSE_READ_EXPIRED, "read permission expired")
                return
        self._arm_expiry()  # fired early by the wall clock: set it again

    def _stop_expiry(self) -> None:
        self._expiry_due = NO_END_MS
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    def _tick(self) -> None:
        """Keepalive: ping when the peer was heard since the last tick, else give up."""
        if self._gone or self._closing:
            return
        if not self._heard:
            self.close(CLOSE_INTERNAL_ERROR, "keepalive timeout")
            return
        self._heard = False
        self._write(self._frames.ping())
        self._keepalive = self._loop.call_later(self._ping_s, self._tick)


class YjsConnection(YjsSocket):
    """A y-websocket connection: one document, its messages as they are."""

    def __init__(
        self,
        ctx: YjsContext,
        transport: asyncio.Transport,
        trailing: bytes,
        ns: str,
        crdt_id: str,
        principal: Principal,
        *,
        writable: bool,
        origin: str | None = None,
    ) -> None:
        super().__init__(ctx, transport)
        self._denied = False
        self.channel = YjsChannel(
            ctx, self, ns, crdt_id, principal, writable=writable, origin=origin
        )
        self.channel.start()
        self._arm_expiry()
        if trailing:
            self._loop.call_soon(self.data_received, trailing)

    def channels(self) -> list[YjsChannel]:
        return [self.channel]

    def on_message(self, data: bytes | str) -> None:
        self.channel.receive(data)

    def send_message(self, channel: YjsChannel, message: bytes) -> None:
        self._write(ws_frame(WS_OPCODE_BINARY, message))

    def read_only_update(self, channel: YjsChannel) -> None:
        # y-protocols' auth message, once: the provider logs the reason.
        if not self._denied:
            self._denied = True
            self.send_message(channel, permission_denied("read-only token: updates are ignored"))

    def send_delta(self, channel: YjsChannel, delta: EncodedDelta) -> None:
        frame = delta.form("yjs", _update_frame)
        if frame:
            self._write(frame)
