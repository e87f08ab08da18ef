"""The socket side of Yjs connections: y-websocket's, and the base Hocuspocus's
builds on.

Theory of operation
-------------------
A Yjs socket runs on the WebSocket stack every socket runs on: the sans-I/O
:class:`~syncd.ws.base_session.BaseSession` (frames, keepalive, the close
handshake, read backpressure) inside the
:class:`~syncd.ws.base_connection.BaseConnection` adapter (the socket, its
timers, write backpressure, the connection gauge), exactly as a native
WebSocket does. :class:`YjsSocket` adds what Yjs needs on top: each whole
message goes to :meth:`YjsSocket.on_message`; the documents themselves are
:class:`~syncd.yjs.channel.YjsChannel` objects, each with its sans-I/O
:class:`~syncd.yjs.protocol.YjsSession`, which call back through the channel
``Owner`` protocol implemented here.

:class:`YjsConnection` is the y-websocket protocol: one document per
connection, its messages the channel's messages as they are.

Expiry: the shared expiry timer is set to the earliest end of a channel's
read (its token's expiry, or earlier the end of the rules that grant it) and
re-armed when channels come and go; it closes the connection then: 4401
(:data:`CLOSE_TOKEN_EXPIRED`) when a token expired, 4403
(:data:`CLOSE_READ_EXPIRED`) when only a rule did. Providers reconnect and
authenticate again, with a new token if they have one.

Backpressure: while the transport's buffer is over the subscriber bound,
deltas are not sent and the socket is not read; once it drains, each channel
that skipped some sends the whole document as one update (Yjs merges what it
has). A whole document (a fresh provider's step 2, that update) is one
object shared with the other connections sent it, written in slices as the
socket drains; deltas that come meanwhile wait behind it, up to the same
bound (see :mod:`syncd.ws.base_connection`). Reading also stops while
:data:`MAX_INFLIGHT_UPDATES` of the peer's updates await the store, while an
update, a repeated step 1 or a query-awareness waits for the token's rate
limit, and while a document is read from the store for a joining peer.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Final

from syncd.auth.authenticator import NO_END_MS, TOKEN_EXPIRED_MESSAGE
from syncd.hub import EncodedDelta
from syncd.wire import WS_OPCODE_BINARY, ws_frame, ws_header
from syncd.ws.base_connection import BaseConnection, ConnectionTimers
from syncd.ws.base_session import BaseSession
from syncd.ws.framing import CLOSE_READ_EXPIRED, CLOSE_TOKEN_EXPIRED
from syncd.yjs.channel import YjsChannel, YjsContext, update_of
from syncd.yjs.protocol import permission_denied, sync_update

if TYPE_CHECKING:
    from syncd.auth.authenticator import Principal
    from syncd.shared_states import SharedState

MAX_INFLIGHT_UPDATES: Final = 256
"""A peer's updates awaiting the store before we stop reading its socket: a
provider sends one per edit, so this is a burst, not a steady state."""

RESUME_INFLIGHT_UPDATES: Final = MAX_INFLIGHT_UPDATES // 2
"""Reading resumes once this few remain, so it does not flap per update."""


def _update_frame(delta: dict[str, Any]) -> bytes:
    """A delta as a y-websocket update message in a binary frame."""
    update = update_of(delta)
    return ws_frame(WS_OPCODE_BINARY, sync_update(update)) if update else b""


class YjsSocket(BaseConnection):
    """The shared socket adapter of Yjs connections; subclasses say what a
    message means (:meth:`on_message`) and which channels they hold."""

    __slots__ = ("_ctx",)

    def __init__(
        self,
        ctx: YjsContext,
        transport: asyncio.Transport,
        trailing: bytes,
        timers: ConnectionTimers,
    ) -> None:
        settings = ctx.settings
        self._ctx = ctx
        session = BaseSession(
            self._do,
            self,
            max_message_bytes=settings.max_body_bytes,
            ping_s=settings.ws_ping_s,
            now=asyncio.get_running_loop().time(),
            max_inflight=MAX_INFLIGHT_UPDATES,
            resume_inflight=RESUME_INFLIGHT_UPDATES,
        )
        super().__init__(
            transport,
            session,
            trailing,
            bound=settings.subscriber_buffer_bytes,
            auth=ctx.auth,
            metrics=ctx.metrics,
            server=ctx.server,
            timers=timers,
        )

    # -- what subclasses provide ---------------------------------------------

    def on_message(self, data: bytes | str) -> None:
        raise NotImplementedError

    def channels(self) -> list[YjsChannel]:
        raise NotImplementedError

    # -- the base connection's hooks -----------------------------------------

    def _closing(self) -> None:
        for channel in self.channels():
            channel.closed = True  # nothing more goes out for it

    def _lost(self) -> None:
        for channel in self.channels():
            channel.leave()

    def _drained(self) -> None:
        if not self.session.closing:
            for channel in self.channels():
                channel.drained()

    def _expiry_due_ms(self) -> int | None:
        if self.session.closing:
            return None
        due = min((channel.until for channel in self.channels()), default=NO_END_MS)
        return None if due == NO_END_MS else due

    def _expire(self) -> None:
        if self.session.closing:
            return
        now = self._auth.now_ms()
        for channel in self.channels():
            if channel.until <= now:
                expires_at = channel.principal.expires_at
                if expires_at is not None and now >= expires_at:
                    self.close(CLOSE_TOKEN_EXPIRED, TOKEN_EXPIRED_MESSAGE)
                else:
                    self.close(CLOSE_READ_EXPIRED, "read permission expired")
                return
        # Fired early by the wall clock: the base connection sets it again.

    # -- the channels' Owner -------------------------------------------------

    def close_document(self, channel: YjsChannel, code: int, reason: str) -> None:
        self.close(code, reason)  # one document per socket (Hocuspocus overrides)

    def update_started(self) -> None:
        self.session.started()

    def update_done(self, channel: YjsChannel, applied: bool) -> None:
        pass  # the acknowledgement, for protocols that have one (Hocuspocus)

    def update_finished(self) -> None:
        """An update that ``update_started`` counted is no longer in flight."""
        self.session.settled()

    def hold_reading(self, held: bool) -> None:
        if held:
            self.session.hold()
        else:
            self.session.release()


class YjsConnection(YjsSocket):
    """A y-websocket connection: one document, its messages as they are."""

    __slots__ = ("channel",)

    def __init__(
        self,
        ctx: YjsContext,
        transport: asyncio.Transport,
        trailing: bytes,
        timers: ConnectionTimers,
        ns: str,
        crdt_id: str,
        principal: Principal,
        *,
        writable: bool,
        origin: str | None = None,
    ) -> None:
        super().__init__(ctx, transport, trailing, timers)
        self.channel = YjsChannel(
            ctx, self, ns, crdt_id, principal, writable=writable, origin=origin
        )
        self.channel.start()
        self._arm_expiry()

    def channels(self) -> list[YjsChannel]:
        return [self.channel]

    def on_message(self, data: bytes | str) -> None:
        self.channel.receive(data)

    def send_message(self, channel: YjsChannel, message: bytes) -> None:
        self.send(ws_frame(WS_OPCODE_BINARY, message))

    def send_shared(self, channel: YjsChannel, head: bytes, state: SharedState) -> None:
        self.feed(ws_header(WS_OPCODE_BINARY, len(head) + len(state)) + head, state)

    def read_only_update(self, channel: YjsChannel) -> None:
        # y-protocols' auth message, once: the provider logs the reason.
        if not channel.told_read_only:
            channel.told_read_only = True
            self.send_message(channel, permission_denied("read-only token: updates are ignored"))

    def send_delta(self, channel: YjsChannel, delta: EncodedDelta) -> None:
        frame = delta.form("yjs", _update_frame)
        if frame:
            self.send(frame)
