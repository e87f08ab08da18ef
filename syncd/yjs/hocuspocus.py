"""The Hocuspocus protocol (``@hocuspocus/provider``) on syncd's Yjs documents.

Theory of operation
-------------------
Hocuspocus speaks the same y-protocols messages as y-websocket, with three
differences, and this module is those differences; the documents are the
same :class:`~syncd.yjs.channel.YjsChannel`s y-websocket connections use,
so both kinds of provider edit one document together.

- **Multiplexed.** One socket carries many documents: every message starts
  with the document's name (a lib0 var-string; with ``sessionAwareness`` the
  name is followed by ``\\0`` and a session id, which we echo back). A
  connection holds up to :data:`MAX_DOCUMENTS` channels.
- **Authenticated in band.** The upgrade carries no token. Each document
  opens with an auth message (type 2, ``0`` token, the token, the provider's
  version); we answer ``2`` authenticated with the scope (``read-write`` or
  ``readonly``) and open the channel (our step 1, the room's awareness), or
  ``1`` permission denied with the reason. Messages for a document before
  its auth succeeded are dropped. An auth for a document already open on
  the socket (a provider's new token) is checked like the first: granted,
  the document goes on under the new token's scope and read; refused, it is
  answered permission denied and detached, the socket's other documents
  untouched. A socket that authenticates no document
  within :data:`AUTH_TIMEOUT_S` is closed (1008).
- **Acknowledged.** Each update is answered with a sync-status message
  (type 8, ``1`` once durable, ``0`` when refused or read-only), which the
  provider counts to know it has no unsynced changes.

A close message (type 7) from the provider detaches that document; stateless
messages (5) are not supported and ignored, like unknown types. What ends
one document ends it alone, with our close message on its name, as
Hocuspocus's server does: its deletion, or an update or awareness update of
it refused (malformed, too large, over a quota, a permission of it).

The socket closes for what concerns all of it: a message that is not
Hocuspocus, an unavailable store, and the end of a read. Each document's
read ends with its own token (or the rules that grant it): the first to end
closes the socket (4401, or 4403 for a rule; see
:mod:`syncd.yjs.connection`), and the providers reconnect and authenticate
every document again, each with its current token.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from pycrdt import Encoder

from syncd.errors import ApiError
from syncd.hub import EncodedDelta
from syncd.wire import WS_OPCODE_BINARY, ws_frame, ws_header
from syncd.ws.framing import CLOSE_PROTOCOL_ERROR
from syncd.yjs.channel import (
    CLOSE_POLICY,
    YjsChannel,
    YjsContext,
    may_write,
    retry_after,
    update_of,
)
from syncd.yjs.connection import YjsSocket
from syncd.yjs.protocol import Reader, sync_update, var_string

if TYPE_CHECKING:
    from syncd.auth.authenticator import Principal
    from syncd.shared_states import SharedState
    from syncd.ws.base_connection import ConnectionTimers

MESSAGE_AUTH: Final = 2
MESSAGE_CLOSE: Final = 7
MESSAGE_SYNC_STATUS: Final = 8
MESSAGE_PONG: Final = 10
CHANNEL_MESSAGES: Final = frozenset({0, 1, 3})
"""Sync, awareness and query-awareness: the channel's own y-protocols messages."""

AUTH_TOKEN: Final = 0
AUTH_PERMISSION_DENIED: Final = 1
AUTH_AUTHENTICATED: Final = 2

MAX_DOCUMENTS: Final = 100
"""Documents one Hocuspocus connection may open: an editor opens a few."""

MAX_NAME_BYTES: Final = 1024
"""A document name (with its session id): ids are at most 256 characters."""

AUTH_TIMEOUT_S: Final = 10.0
"""A socket that has authenticated no document by then is closed: an
unauthenticated socket must not hold a connection slot for long."""


def _string(text: str) -> bytes:
    return var_string(text)


def _uint(n: int) -> bytes:
    encoder = Encoder()
    encoder.write_var_uint(n)
    return encoder.to_bytes()


def authenticated(name: str, scope: str) -> bytes:
    return _string(name) + _uint(MESSAGE_AUTH) + _uint(AUTH_AUTHENTICATED) + _string(scope)


def permission_denied(name: str, reason: str) -> bytes:
    return _string(name) + _uint(MESSAGE_AUTH) + _uint(AUTH_PERMISSION_DENIED) + _string(reason)


def sync_status(name: str, applied: bool) -> bytes:
    # lib0 var-int: 0 and 1 are one byte each, as they are as var-uints.
    return _string(name) + _uint(MESSAGE_SYNC_STATUS) + (b"\x01" if applied else b"\x00")


def close_message(name: str, reason: str) -> bytes:
    """Hocuspocus's close of one document (the provider reads its reason)."""
    return _string(name) + _uint(MESSAGE_CLOSE) + _string(reason)


def parse(data: bytes) -> tuple[str, int, bytes]:
    """``(document name, message type, the rest)``; ValueError when malformed."""
    reader = Reader(data)
    length = reader.var_uint()
    if length > MAX_NAME_BYTES:
        raise ValueError("bad document name")
    name = reader.take(length).decode("utf-8")
    kind = reader.var_uint()
    return name, kind, reader.rest()


def read_token(rest: bytes) -> str | None:
    """The token of an auth message's body, or None for another auth message."""
    reader = Reader(rest)
    if reader.var_uint() != AUTH_TOKEN:
        return None
    return reader.byte_string().decode("utf-8")


class HocuspocusConnection(YjsSocket):
    __slots__ = (
        "_auth_timer",
        "_channels",
        "_document_id",
        "_names",
        "_origin",
        "_waiting_auth",
        "ns",
    )

    def __init__(
        self,
        ctx: YjsContext,
        transport: asyncio.Transport,
        trailing: bytes,
        timers: ConnectionTimers,
        ns: str,
        document_id: Callable[[str], str],
        origin: str | None = None,
    ) -> None:
        super().__init__(ctx, transport, trailing, timers)
        self.ns = ns
        self._origin = origin
        """The connection's ``?origin=``, given to every document's updates."""
        self._document_id = document_id
        """Room name -> document id (the y-websocket endpoint's rule)."""
        self._channels: dict[str, YjsChannel] = {}
        self._names: dict[YjsChannel, str] = {}
        self._auth_timer: asyncio.TimerHandle | None = self._loop.call_later(
            AUTH_TIMEOUT_S, self._auth_timeout
        )
        self._waiting_auth: asyncio.TimerHandle | None = None
        """An auth over the token's rate limit, asked again when this fires."""

    def channels(self) -> list[YjsChannel]:
        return list(self._channels.values())

    def _lost(self) -> None:
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        if self._waiting_auth is not None:
            self._waiting_auth.cancel()
            self._waiting_auth = None
        super()._lost()

    def _auth_timeout(self) -> None:
        self._auth_timer = None
        if not self._channels:
            self.close(CLOSE_POLICY, "no document authenticated")

    # -- messages ------------------------------------------------------------

    def on_message(self, data: bytes | str) -> None:
        if isinstance(data, str):
            self.close(CLOSE_PROTOCOL_ERROR, "Hocuspocus messages are binary")
            return
        if data == _uint(MESSAGE_PONG):
            return  # the answer to a connection-level ping (we ping with frames)
        try:
            name, kind, rest = parse(data)
            if kind == MESSAGE_AUTH:
                token = read_token(rest)
                if token is not None:
                    self._authenticate(name, token)
                return
        except (ValueError, IndexError, UnicodeDecodeError, RuntimeError):
            self.close(CLOSE_PROTOCOL_ERROR, "malformed Hocuspocus message")
            return
        channel = self._channels.get(name)
        if channel is None:
            return  # not authenticated for it (yet): dropped, as Hocuspocus does
        if kind in CHANNEL_MESSAGES:
            channel.receive(_uint(kind) + rest)
        elif kind == MESSAGE_CLOSE:
            self._detach(name)

    def _authenticate(self, name: str, token: str) -> None:
        """Answer an auth for ``name``: a new channel, or for a document
        already open on this socket (a provider sending a new token), the
        same channel under the new token's scope; refused, it is closed."""
        open_channel = self._channels.get(name)
        auth = self._ctx.auth
        try:
            crdt_id = self._document_id(name.split("\0", 1)[0])
            principal: Principal = auth.authenticate(f"Bearer {token}", self.ns)
            auth.check_read(principal, crdt_id)
            if open_channel is None and len(self._channels) >= MAX_DOCUMENTS:
                raise ApiError(
                    400, "bad_request", f"at most {MAX_DOCUMENTS} documents per connection"
                )
        except ApiError as exc:
            if exc.status == 429 and not self.session.closing:
                self._wait_for_rate(name, token, exc)
                return
            # Denied first: the provider hears nothing more of that document.
            self._write_raw(permission_denied(name, f"{exc.code}: {exc.message}"))
            self._detach(name)
            return
        writable = may_write(auth, principal, crdt_id)
        self._write_raw(authenticated(name, "read-write" if writable else "readonly"))
        if open_channel is not None:
            open_channel.reauthorize(principal, writable=writable)
            self._arm_expiry()
            return
        channel = YjsChannel(
            self._ctx,
            self,
            self.ns,
            crdt_id,
            principal,
            writable=writable,
            origin=self._origin,
            resync_step1=True,
        )
        self._channels[name] = channel
        self._names[channel] = name
        channel.start()
        self._arm_expiry()

    def _wait_for_rate(self, name: str, token: str, exc: ApiError) -> None:
        """The auth met the token's rate limit: ask again once it allows, and
        read nothing meanwhile (what follows an auth, the provider's step 1,
        is for that document). Not refused: a Hocuspocus provider told
        "permission denied" never asks again, and its edits would wait for a
        new socket; a y-websocket provider refused 429 at the handshake
        reconnects, and an update over the limit waits too."""
        self.hold_reading(True)

        def again() -> None:
            self._waiting_auth = None
            try:
                if not self.session.closing:
                    self._authenticate(name, token)  # may wait again, holding again
            finally:
                self.hold_reading(False)

        self._waiting_auth = self._loop.call_later(retry_after(exc), again)

    def _detach(self, name: str) -> None:
        channel = self._channels.pop(name, None)
        if channel is not None:
            del self._names[channel]
            channel.leave()
            self._arm_expiry()

    # -- the channels' Owner -------------------------------------------------

    def send_message(self, channel: YjsChannel, message: bytes) -> None:
        name = self._names.get(channel)
        if name is not None:
            self._write_raw(_string(name) + message)

    def send_shared(self, channel: YjsChannel, head: bytes, state: SharedState) -> None:
        name = self._names.get(channel)
        if name is not None:
            prefix = _string(name) + head
            self.feed(ws_header(WS_OPCODE_BINARY, len(prefix) + len(state)) + prefix, state)

    def send_delta(self, channel: YjsChannel, delta: EncodedDelta) -> None:
        name = self._names.get(channel)
        if name is None:
            return
        prefix = _string(name)

        def frame(data: dict[str, Any]) -> bytes:
            update = update_of(data)
            return ws_frame(WS_OPCODE_BINARY, prefix + sync_update(update)) if update else b""

        data = delta.form("hocuspocus:" + name, frame)
        if data:
            self.send(data)

    def close_document(self, channel: YjsChannel, code: int, reason: str) -> None:
        """That document alone ends, with a close message on its name, as
        Hocuspocus's server closes one document (its provider is told, and
        asks again when its socket reconnects); the socket's other documents
        go on. Closing the socket ended them too, and an update refused
        again on each reconnect kept them all reconnecting."""
        name = self._names.get(channel)
        if name is None or self.session.closing:
            return
        self._write_raw(close_message(name, reason))
        self._detach(name)

    def update_done(self, channel: YjsChannel, applied: bool) -> None:
        name = self._names.get(channel)
        if name is not None:
            self._write_raw(sync_status(name, applied))

    def read_only_update(self, channel: YjsChannel) -> None:
        name = self._names.get(channel)
        if name is not None:
            self._write_raw(sync_status(name, False))

    def _write_raw(self, message: bytes) -> None:
        self.send(ws_frame(WS_OPCODE_BINARY, message))
