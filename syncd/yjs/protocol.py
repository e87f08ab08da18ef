"""The y-websocket protocol of one connection, without I/O.

Theory of operation
-------------------
y-websocket (the ``y-protocols`` package) sends binary WebSocket messages,
each a var-uint message type and a body, coded with lib0's var-uints and
length-prefixed byte strings (:class:`Reader` reads them, pycrdt's
``Encoder`` writes them):

====================  =====================================================
``0`` sync            a var-uint step and a byte string: ``0`` step 1 (the
                      peer's state vector: "send me what I lack"), ``1``
                      step 2 (an update answering a step 1), ``2`` update
``1`` awareness       a byte string: an awareness update (cursors, names)
``2`` auth            server to client only: ``0`` permission denied, reason
``3`` query awareness "send me every awareness state you know"
====================  =====================================================

A connection opens with the server's step 1 (our state vector) and the
room's awareness states; the client answers with its step 2 (what we lack)
and sends its own step 1, which we answer with a step 2. After that both
sides send updates as they happen.

:class:`YjsSession` is one document's protocol on one connection, a layer
on top of the WebSocket session every socket runs on
(:class:`~syncd.ws.base_session.BaseSession`, which owns the frames,
keepalive, the close handshake and backpressure). It turns one whole message
into actions for the document's channel (:mod:`syncd.yjs.channel`), emitted
through an injected callable (each a :class:`~syncd.ws.base_session.Action`):
``Send`` (one y-protocols message, which the socket frames: y-websocket as it
is, Hocuspocus after the document's name), :class:`SendDiff` (answer a step 1
from the document), :class:`ApplyUpdate`, :class:`RelayAwareness`,
:class:`SendAwareness`, :class:`EmptyUpdate` for an update that carries
nothing, and :class:`ReadOnlyUpdate` for an update from a connection that may
not write (the document is not changed; the socket says so in its protocol's
way). A message that does not parse closes the connection (1002) through the
injected ``closer``: the socket's ``close``, which starts the WebSocket
session's closing handshake, the layer below.

Unknown message types are ignored, as y-websocket's own server does, so newer
clients keep working.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from pycrdt import Encoder

from syncd.ws.base_session import Action, Send
from syncd.ws.framing import CLOSE_PROTOCOL_ERROR

MESSAGE_SYNC: Final = 0
MESSAGE_AWARENESS: Final = 1
MESSAGE_AUTH: Final = 2
MESSAGE_QUERY_AWARENESS: Final = 3

SYNC_STEP1: Final = 0
SYNC_STEP2: Final = 1
SYNC_UPDATE: Final = 2

AUTH_PERMISSION_DENIED: Final = 0

EMPTY_UPDATE: Final = b"\x00\x00"


class Closer(Protocol):
    def close(self, code: int, reason: str = "") -> None:
        """Close the connection with ``code``."""
        ...


@dataclass(frozen=True, slots=True)
class SendDiff(Action):
    """Answer the peer's step 1: a step 2 with what ``state_vector`` lacks."""

    state_vector: bytes


@dataclass(frozen=True, slots=True)
class ApplyUpdate(Action):
    update: bytes
    answer: bool = False
    """A step 2, the peer's answer to our step 1: it often brings nothing
    new (a diff always carries the peer's whole delete set)."""


@dataclass(frozen=True, slots=True)
class RelayAwareness(Action):
    update: bytes


@dataclass(frozen=True, slots=True)
class SendAwareness(Action):
    """Send the peer every awareness state of the room."""


@dataclass(frozen=True, slots=True)
class EmptyUpdate(Action):
    """The peer sent an update that carries nothing (an up-to-date step 2)."""


@dataclass(frozen=True, slots=True)
class ReadOnlyUpdate(Action):
    """The peer sent an update, and may not write: the document is not changed."""

    update: bytes = b""
    answer: bool = False
    """A step 2 (then ``update`` is its payload): if it brings nothing new,
    the peer is up to date, and is told so."""


def _message_part(part: int | bytes) -> bytes:
    encoder = Encoder()
    if isinstance(part, int):
        encoder.write_var_uint(part)
        return encoder.to_bytes()
    encoder.write_var_uint(len(part))
    return encoder.to_bytes() + part


def sync_head(step: int, length: int) -> bytes:
    """A sync message's bytes before its payload of ``length`` bytes (a whole
    document, written after it as it is, never copied behind it)."""
    encoder = Encoder()
    encoder.write_var_uint(MESSAGE_SYNC)
    encoder.write_var_uint(step)
    encoder.write_var_uint(length)
    return encoder.to_bytes()


def sync_step1(state_vector: bytes) -> bytes:
    return _message_part(MESSAGE_SYNC) + _message_part(SYNC_STEP1) + _message_part(state_vector)


def sync_step2(update: bytes) -> bytes:
    return _message_part(MESSAGE_SYNC) + _message_part(SYNC_STEP2) + _message_part(update)


def sync_update(update: bytes) -> bytes:
    return _message_part(MESSAGE_SYNC) + _message_part(SYNC_UPDATE) + _message_part(update)


def awareness_message(update: bytes) -> bytes:
    return _message_part(MESSAGE_AWARENESS) + _message_part(update)


def var_string(text: str) -> bytes:
    """lib0's var-string: its length in UTF-8 bytes, then those bytes.
    (pycrdt's ``Encoder.write_var_string`` writes the length in characters,
    which a peer reads askew for any text outside ASCII.)"""
    data = text.encode()
    return _message_part(data)


def permission_denied(reason: str) -> bytes:
    encoder = Encoder()
    encoder.write_var_uint(MESSAGE_AUTH)
    encoder.write_var_uint(AUTH_PERMISSION_DENIED)
    return encoder.to_bytes() + var_string(reason)


MAX_VAR_UINT: Final = 2**53 - 1
"""lib0's largest var-uint (JavaScript's ``Number.MAX_SAFE_INTEGER``): lib0
refuses a larger one, and so do we."""


class Reader:
    """lib0 decoding of a peer's bytes: var-uints and length-prefixed byte
    strings, in time linear in the bytes read, and whole or not at all
    (ValueError).

    Not pycrdt's ``Decoder``: its ``read_var_uint`` shifts each 7-bit group
    into a Python int without bound, O(n²) in a var-uint's continuation
    bytes, so one 1 MB message of ``0xff`` bytes held the event loop for a
    minute; and its byte strings come back truncated without a word. As in
    lib0, a var-uint past :data:`MAX_VAR_UINT` is refused; an over-long
    encoding of a smaller one is read."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def var_uint(self) -> int:
        data = self.data
        pos = self.pos
        end = len(data)
        value = 0
        shift = 0
        while pos < end:
            byte = data[pos]
            pos += 1
            if byte & 0x7F:
                if shift > 53:
                    raise ValueError("var-uint out of range")
                value |= (byte & 0x7F) << shift
                if value > MAX_VAR_UINT:
                    raise ValueError("var-uint out of range")
            if byte < 0x80:
                self.pos = pos
                return value
            shift += 7
        raise ValueError("truncated var-uint")

    def take(self, length: int) -> bytes:
        """The next ``length`` bytes, all of them."""
        start = self.pos
        if length > len(self.data) - start:
            raise ValueError("truncated message")
        self.pos = start + length
        return self.data[start : self.pos]

    def byte_string(self) -> bytes:
        """A length-prefixed byte string, whole."""
        return self.take(self.var_uint())

    def rest(self) -> bytes:
        """Everything not read yet."""
        return self.data[self.pos :]


def check_state_vector(state_vector: bytes) -> None:
    """ValueError unless ``state_vector`` holds what its head claims: a
    count, then as many (client, clock) pairs, as lib0 writes one (what
    follows is ignored, as lib0 does). Checked before Yrs reads it: Yrs sizes
    its map by the count before reading any pair, so ten bytes claiming
    2**29 clients cost 1 GB and 0.7 s of the event loop, per message."""
    reader = Reader(state_vector)
    count = reader.var_uint()
    if count > (len(state_vector) - reader.pos) // 2:  # a pair takes 2 bytes at least
        raise ValueError("a state vector shorter than its count")
    for _ in range(count):
        reader.var_uint()  # the client
        reader.var_uint()  # its clock


class YjsSession:
    """One connection's y-websocket protocol state; see the module docstring."""

    __slots__ = ("_closer", "_emit", "writable")

    def __init__(self, emit: Callable[[Action], None], closer: Closer, *, writable: bool) -> None:
        self._emit = emit
        self._closer = closer
        self.writable = writable

    def start(self, state_vector: bytes, awareness: bytes | None) -> None:
        """The server's opening: its step 1, then the room's awareness states."""
        self._emit(Send(sync_step1(state_vector)))
        if awareness is not None:
            self._emit(Send(awareness_message(awareness)))

    def receive(self, message: bytes | str) -> None:
        """One whole WebSocket message from the peer."""
        if isinstance(message, str):
            self._closer.close(CLOSE_PROTOCOL_ERROR, "y-websocket messages are binary")
            return
        try:
            reader = Reader(message)
            kind = reader.var_uint()
            if kind == MESSAGE_SYNC:
                step = reader.var_uint()
                self._sync(step, reader.byte_string())
            elif kind == MESSAGE_AWARENESS:
                self._emit(RelayAwareness(reader.byte_string()))
            elif kind == MESSAGE_QUERY_AWARENESS:
                self._emit(SendAwareness())
        except Exception:  # lib0 decoding of bytes a peer chose
            self._closer.close(CLOSE_PROTOCOL_ERROR, "malformed y-websocket message")

    def _sync(self, step: int, payload: bytes) -> None:
        if step == SYNC_STEP1:
            check_state_vector(payload)
            self._emit(SendDiff(payload))
        elif step in (SYNC_STEP2, SYNC_UPDATE):
            if payload == EMPTY_UPDATE:
                self._emit(EmptyUpdate())
                return
            answer = step == SYNC_STEP2
            if self.writable:
                self._emit(ApplyUpdate(payload, answer))
            else:
                self._emit(ReadOnlyUpdate(payload, answer) if answer else ReadOnlyUpdate())
        else:
            raise ValueError(f"unknown sync step {step}")
