"""The WebSocket frame layer of one connection, without I/O (wsproto underneath).

Bytes go in with :meth:`FrameLayer.feed`; :meth:`FrameLayer.events` yields what
they meant, one complete message at a time:

- :class:`Message`: a whole data message, ``bytes`` (binary) or ``str`` (text);
- :class:`Reply`: bytes to send back at once (the pong to a protocol ping);
- :class:`PeerClosed`: the peer's close frame; :meth:`answer_close` builds ours;
- :class:`Failed`: the peer broke the protocol (1002, or 1007 for bad UTF-8;
  nothing more is parsed) or sent a message over the size limit (1009); the
  caller must :meth:`close` with that code before feeding more bytes.

wsproto hands out message payloads as they arrive, frame by frame and even in
parts of a frame, so a message's size is known long before it is complete; we
count and refuse at the limit instead of buffering a giant message first.

The fast path
-------------
wsproto costs tens of microseconds per frame in pure Python, more than the
rest of an op's handling. Nearly every client frame is the simplest kind: a
whole message in one final, masked, uncompressed binary or text frame. We
read frame headers ourselves, and such a frame, once complete, is unmasked
and decoded here; so are the keepalive's pings and pongs (answered, or
dropped, as wsproto would). Every other frame (close frames, fragments,
anything malformed, anything once closing has begun) is handed to wsproto
whole, at a frame boundary, so wsproto's state is exactly what it would be
had it seen only those frames. ``fast_path=False`` gives everything to
wsproto; the tests check that both give the same events for any bytes.

wsproto's connection (~1.5 KB with its event queue and frame decoder) is
made when it is first needed, not with the connection: a connection that
sends only whole messages, pings and pongs (every idle one) never needs it
until it closes. Until then the state is wsproto's first, OPEN.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Final, cast

from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import LocalProtocolError

CLOSE_NORMAL: Final = 1000
CLOSE_GOING_AWAY: Final = 1001
CLOSE_PROTOCOL_ERROR: Final = 1002
CLOSE_BAD_DATA: Final = 1007
CLOSE_TOO_BIG: Final = 1009
CLOSE_INTERNAL_ERROR: Final = 1011
"""Also what the websockets library closes with when a keepalive ping times out."""
CLOSE_TOKEN_EXPIRED: Final = 4401
"""The token expired while the connection was open. 4000-4999 are the
application's (RFC 6455 7.4.2); 4401 echoes HTTP's 401, as Hocuspocus's own
``Unauthorized`` does, so a provider's close handler can tell it apart."""
CLOSE_READ_EXPIRED: Final = 4403
"""The rule that granted a Yjs document's read expired (the token is still
good): HTTP's 403, as Hocuspocus's ``Forbidden``."""

_OPEN: Final = ConnectionState.OPEN
_LOCAL_CLOSING: Final = ConnectionState.LOCAL_CLOSING
_PING: Final = 0x9
_PONG: Final = 0xA
MAX_CONTROL_PAYLOAD: Final = 125
"""A control frame's payload limit (RFC 6455 5.5): one length byte, no more."""


class Message:
    __slots__ = ("data",)

    def __init__(self, data: bytes | str) -> None:
        self.data = data


class Reply:
    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class PeerClosed:
    __slots__ = ("code", "reason")

    def __init__(self, code: int, reason: str | None) -> None:
        self.code = code
        self.reason = reason


class Failed:
    __slots__ = ("code", "reason")

    def __init__(self, code: int, reason: str) -> None:
        self.code = code
        self.reason = reason


Event = Message | Reply | PeerClosed | Failed


def _utf8_size(text: str) -> int:
    # isascii() is a flag check in CPython: the common case costs nothing.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


_REPUNITS: Final = tuple(((1 << (32 * words)) - 1) // 0xFFFFFFFF for words in range(64))
"""1 + 2^32 + 2^64 + ...: a 4-byte key times this repeats it ``words`` times."""


def _unmask(buf: bytearray, start: int, end: int) -> bytes:
    """The payload ``buf[start:end]`` unmasked with the key just before it."""
    n = end - start
    words = (n + 3) >> 2
    repunit = (
        _REPUNITS[words] if words < len(_REPUNITS) else ((1 << (32 * words)) - 1) // 0xFFFFFFFF
    )
    # One big-integer XOR: C speed for any length, no per-byte Python.
    key = int.from_bytes(buf[start - 4 : start], "little") * repunit
    unmasked = int.from_bytes(buf[start:end], "little") ^ key
    return unmasked.to_bytes(words << 2, "little")[:n]


class FrameLayer:
    """One server-side connection's frames; ``max_message_bytes`` bounds each message."""

    # One per open connection: slots keep an idle one small.
    __slots__ = (
        "_ahead",
        "_buf",
        "_conn",
        "_discard",
        "_failed",
        "_fast",
        "_fragmented",
        "_max",
        "_parts",
        "_pos",
        "_size",
        "_to_wsproto",
    )

    def __init__(self, max_message_bytes: int, *, fast_path: bool = True) -> None:
        if max_message_bytes < 1:
            raise ValueError("max_message_bytes must be positive")
        self._conn: Connection | None = None if fast_path else Connection(ConnectionType.SERVER)
        """wsproto's connection, once a frame needs it (see the module docstring)."""
        self._max = max_message_bytes
        self._fast = fast_path
        self._buf = bytearray()
        self._pos = 0
        """``_buf[_pos:]``: bytes not yet parsed here nor handed to wsproto."""
        self._ahead = 0
        """Where :meth:`close_ahead` looks next: a frame's start in ``_buf``
        (or before ``_pos``: then it looks from there), so each byte held is
        looked at once, not at every read."""
        self._to_wsproto = 0
        """Bytes of the current frame still owed to wsproto (it has its start)."""
        self._discard = 0
        """Bytes of a refused over-size frame still to drop."""
        self._fragmented = False
        """A fragmented message is under way (wsproto holds its state)."""
        self._parts: bytearray | io.StringIO | None = None
        """A fragmented message so far (None between messages, as fragments are
        rare). One growing buffer, not a list of the fragments: a message of
        1-byte fragments held as a list of bytes objects cost over 40 bytes of
        memory per byte of message (over 120 at its peak)."""
        self._size = 0
        self._failed = False

    @property
    def _state(self) -> ConnectionState:
        conn = self._conn
        return _OPEN if conn is None else conn.state

    def _wsproto(self) -> Connection:
        conn = self._conn
        if conn is None:
            conn = self._conn = Connection(ConnectionType.SERVER)
        return conn

    @property
    def open(self) -> bool:
        """Whether data messages may still be sent (no close sent or received)."""
        return self._state is _OPEN and not self._failed

    @property
    def closed(self) -> bool:
        """The close handshake is complete (both close frames seen)."""
        return self._state is ConnectionState.CLOSED

    @property
    def reading(self) -> bool:
        """Whether received bytes are still worth parsing."""
        state = self._state
        return not self._failed and (state is _OPEN or state is _LOCAL_CLOSING)

    def feed(self, data: bytes) -> None:
        if not self.reading:
            return
        if not self._fast:
            self._wsproto().receive_data(data)
            return
        if self._pos:
            # Parsed bytes leave once per feed, not once per frame.
            del self._buf[: self._pos]
            self._ahead = max(self._ahead - self._pos, 0)
            self._pos = 0
        self._buf += data

    def events(self) -> Iterator[Event]:
        """Everything the bytes fed so far complete. Stopping early is safe: the
        rest stays buffered for the next call."""
        if not self._fast:
            yield from self._wsproto_events()
            return
        buf = self._buf
        while not self._failed:
            pos = self._pos
            n = len(buf) - pos
            if self._discard:
                take = min(n, self._discard)
                self._pos = pos = pos + take
                n -= take
                self._discard -= take
                if self._discard:
                    return
            if self._to_wsproto:
                take = min(n, self._to_wsproto)
                if not take or not self.reading:
                    return
                chunk = bytes(buf[pos : pos + take])
                self._pos = pos + take
                self._to_wsproto -= take
                self._wsproto().receive_data(chunk)
                for event in self._wsproto_events():
                    yield event
                    if type(event) is PeerClosed or type(event) is Failed:
                        return
                continue
            if n < 2:
                if not n and pos:
                    # All parsed: give the buffer back now, not at the next
                    # read (an idle connection would keep its last message).
                    del buf[:]
                    self._pos = self._ahead = 0
                return
            b0 = buf[pos]
            b1 = buf[pos + 1]
            length = b1 & 0x7F
            head = 2
            minimal = True
            if length == 126:
                if n < 4:
                    return
                length = (buf[pos + 2] << 8) | buf[pos + 3]
                head = 4
                minimal = length > 125
            elif length == 127:
                if n < 10:
                    return
                length = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                head = 10
                minimal = 0xFFFF < length < 1 << 63
            opcode = b0 & 0x0F
            masked = b1 & 0x80
            conn = self._conn
            plain = (
                (b0 & 0xF0) == 0x80  # final, no reserved bits
                and masked
                and not self._fragmented
                and (conn is None or conn.state is _OPEN)
            )
            if plain and opcode in (_PING, _PONG) and head == 2:
                # (A two-byte head: the length is at most 125 and minimally
                # encoded, as a control frame's must be.)
                start = pos + head + 4
                end = start + length
                if end > len(buf):
                    return
                self._pos = end
                if opcode == _PING:
                    # wsproto's answer, byte for byte: our pong with its payload.
                    yield Reply(_control_frame(_PONG, _unmask(buf, start, end)))
                continue  # a pong: the keepalive only needed to read something
            if plain and (opcode == 0x2 or opcode == 0x1) and minimal:
                if length > self._max:
                    self._discard = head + 4 + length
                    yield self._too_big()
                    return
                start = pos + head + 4
                end = start + length
                if end > len(buf):
                    return
                data = _unmask(buf, start, end)
                self._pos = end
                if opcode == 0x2:
                    yield Message(data)
                    continue
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError as exc:
                    self._failed = True
                    yield Failed(CLOSE_BAD_DATA, str(exc))
                    return
                yield Message(text)
                continue
            # Anything else goes to wsproto, exactly this one frame.
            if opcode < 0x3 and (b0 & 0x70) == 0 and masked:
                self._fragmented = not (b0 & 0x80)
            self._to_wsproto = head + (4 if masked else 0) + length

    @property
    def unread(self) -> int:
        """Bytes fed and not yet handled (what :meth:`events` has not consumed)."""
        return len(self._buf) - self._pos

    def close_ahead(self) -> bool:
        """Whether a whole close frame is among the bytes fed but not yet
        handled, by their frame headers alone (nothing is consumed): the peer
        is leaving, whatever comes before it."""
        if not self._fast or self._failed:
            return False
        buf = self._buf
        end = len(buf)
        pos = max(self._ahead, self._pos + self._discard + self._to_wsproto)
        while end - pos >= 2:
            b1 = buf[pos + 1]
            length = b1 & 0x7F
            head = 2
            if length == 126:
                if end - pos < 4:
                    break
                length = (buf[pos + 2] << 8) | buf[pos + 3]
                head = 4
            elif length == 127:
                if end - pos < 10:
                    break
                length = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                head = 10
            size = head + (4 if b1 & 0x80 else 0) + length
            if buf[pos] & 0x0F == 0x8:
                if end - pos < size:
                    break  # not whole yet: look here again next time
                return True
            pos += size
        self._ahead = pos
        return False

    def _wsproto_events(self) -> Iterator[Event]:
        if not self.reading:
            return
        conn = self._wsproto()
        for event in conn.events():
            kind = type(event)
            if kind is BytesMessage or kind is TextMessage:
                if conn.state is not _OPEN:
                    continue  # we are closing: data is read and dropped
                message = cast("BytesMessage | TextMessage", event)
                # wsproto builds binary payloads as bytes (the bytearray in its
                # annotation is for payloads given to send).
                data = cast("bytes | str", message.data)
                size = len(data) if kind is BytesMessage else _utf8_size(cast(str, data))
                parts = self._parts
                if message.message_finished and parts is None:
                    if size > self._max:
                        yield self._too_big()
                        return
                    yield Message(data)
                    continue
                self._size += size
                if self._size > self._max:
                    yield self._too_big()
                    return
                if kind is BytesMessage:
                    if parts is None:
                        parts = self._parts = bytearray()
                    cast(bytearray, parts).extend(cast(bytes, data))
                else:
                    if parts is None:
                        parts = self._parts = io.StringIO()
                    cast(io.StringIO, parts).write(cast(str, data))
                if message.message_finished:
                    self._parts, self._size = None, 0
                    if kind is BytesMessage:
                        yield Message(bytes(cast(bytearray, parts)))
                    else:
                        yield Message(cast(io.StringIO, parts).getvalue())
            elif kind is CloseConnection:
                close = cast(CloseConnection, event)
                state = conn.state
                if state is _OPEN or state is _LOCAL_CLOSING:
                    # wsproto reports a parse failure as a close event without a
                    # state change (a real close frame moves the state on); its
                    # parser is dead after that, so nothing more can be read.
                    self._failed = True
                    self._parts = None
                    yield Failed(int(close.code), close.reason or "protocol error")
                    return
                yield PeerClosed(int(close.code), close.reason)
                return
            elif kind is Ping and conn.state is _OPEN:
                yield Reply(conn.send(cast(Ping, event).response()))
            # Pongs need nothing; pings while closing go unanswered.

    def _too_big(self) -> Failed:
        # Parsing can go on (the rest of the message is dropped once our close
        # is sent), so the peer's answering close can still be seen.
        self._parts = None
        self._size = 0
        return Failed(CLOSE_TOO_BIG, f"message over {self._max} bytes (SERVICE_MAX_BODY_BYTES)")

    def ping(self, payload: bytes = b"") -> bytes:
        """A protocol ping (the keepalive); b"" once closing has started."""
        conn = self._conn
        if conn is None:
            # Open, and wsproto not needed: the frame it would make.
            if len(payload) > MAX_CONTROL_PAYLOAD:
                raise ValueError(f"a ping's payload is at most {MAX_CONTROL_PAYLOAD} bytes")
            return _control_frame(_PING, payload)
        if conn.state is not _OPEN:
            return b""
        return bytes(conn.send(Ping(payload)))

    def close(self, code: int, reason: str = "") -> bytes:
        """Our close frame (we start the closing handshake); b"" when too late."""
        try:
            return bytes(self._wsproto().send(CloseConnection(code=code, reason=reason or None)))
        except LocalProtocolError:
            return b""

    def answer_close(self, event: PeerClosed) -> bytes:
        """Our answer to the peer's close frame, completing the handshake."""
        conn = self._conn
        if conn is None or conn.state is not ConnectionState.REMOTE_CLOSING:
            return b""
        code = event.code
        if code == CloseReason.NO_STATUS_RCVD:
            return bytes(conn.send(CloseConnection(code=CloseReason.NO_STATUS_RCVD)))
        return bytes(conn.send(CloseConnection(code=code)))


def _control_frame(opcode: int, payload: bytes) -> bytes:
    """A server's control frame (final, unmasked): ``payload`` is at most 125 bytes."""
    return bytes((0x80 | opcode, len(payload))) + payload
