"""An incremental parser of the SSE stream (docs/protocol.md#the-sse-stream), no I/O.

Feed it bytes as they arrive; it returns the complete events, each its name
and ``data``. The service writes ``data: <base64>`` and a blank line per delta
(an unnamed event: ``message``), ``event: synced`` at the end of the start
(its data encoded as a delta's), ``: ping`` comments, and when the read ends
(the token expires or is revoked, or the rule that granted it expires) a last
event ``event: end`` whose data is the error body as JSON
(docs/protocol.md#the-sse-stream). The parser follows the general rules
(``data`` lines of one event joined by newlines, the last ``event`` line names
it, ``id``/``retry`` and comments ignored, an event without data not
dispatched, CR/LF/CRLF line ends) so a proxy's reformatting does not break it.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Final, NamedTuple

import msgpack

MAX_EVENT_BYTES: Final = 128 * 1024 * 1024
"""Bytes of one event: bounds the memory a broken or hostile server (or
proxy) can make the client hold; past it the stream ends with a
``MessageTooLargeError``. Twice the server's default SERVICE_MAX_CRDT_BYTES
(64 MiB, syncd/quotas.py DEFAULT_MAX_CRDT_BYTES), 128 MiB: a snapshot event
is its state in base64, 4 bytes per 3, and the state may pass the limit (a
Yjs delete-only update by a sixteenth of it, DELETION_HEADROOM_DIVISOR), so
half as much again is left for those. At the limit's bytes a CRDT near the
limit, which the server held and served, ended every stream of it. A server
with a larger SERVICE_MAX_CRDT_BYTES needs ``max_event_bytes`` (on
``events()`` and ``SseParser``) set to match; the JS client's
MAX_EVENT_CHARS is the same bound."""


MESSAGE: Final = "message"
"""The name of an event without an ``event`` line: a delta."""

END: Final = "end"
"""The name of the stream's last event when the read ends."""

SYNCED: Final = "synced"
"""The name of the event (and the kind of the WebSocket message) that ends a
subscription's start (docs/protocol.md#resuming): not a delta."""


class SseProtocolError(ValueError):
    pass


class SseEvent(NamedTuple):
    name: str
    """``message`` unless an ``event`` line named it."""
    data: bytes


class SseEventTooLarge(SseProtocolError):
    pass


class SseParser:
    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buffer = bytearray()
        self._scanned = 0
        """Bytes at the buffer's start known to hold no line end: the next
        chunk's search starts after them, so a long line (one large event's
        data) is scanned once, not again at every chunk."""
        self._name = MESSAGE
        self._data: list[bytes] = []
        self._size = 0
        self._max = max_event_bytes
        self.error: SseEventTooLarge | None = None
        """The event past the bound, once met: raised by every later
        :meth:`feed` (the parser takes nothing more). When the chunk that
        held it completed other events before it, those were returned first
        and this is the only news of it: a reader checks it before reading
        on, so the stream ends without waiting for another chunk."""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """The events completed by ``chunk``. An event past the bound raises
        SseEventTooLarge: at once when ``chunk`` completed no event before
        it, else at the next call (:attr:`error`), after these are returned:
        they were whole events, and one chunk may hold several events before
        an oversize one (a batch's deltas, read at once). Raised at once,
        they were lost with it."""
        if self.error is not None:
            raise self.error
        self._buffer += chunk
        events: list[SseEvent] = []
        try:
            self._feed(events)
        except SseEventTooLarge as exc:
            self.error = exc
            if not events:
                raise
        return events

    def _feed(self, events: list[SseEvent]) -> None:
        start = 0
        scan = self._scanned
        buffer = self._buffer
        while True:
            end = _line_end(buffer, scan)
            if end is None:
                break
            line_end, next_start = end
            self._line(bytes(buffer[start:line_end]), events)
            start = scan = next_start
        del buffer[:start]
        # All of the rest was scanned, but a CR at its end is looked at again:
        # the next chunk may start with the LF of its CRLF.
        self._scanned = max(len(buffer) - 1, 0)
        if len(buffer) + self._size > self._max:
            raise SseEventTooLarge(f"an SSE event is longer than {self._max} bytes")

    def _line(self, line: bytes, events: list[SseEvent]) -> None:
        if not line:
            if self._data:
                events.append(SseEvent(self._name, b"\n".join(self._data)))
            self._name = MESSAGE
            self._data = []
            self._size = 0
            return
        if line.startswith(b":"):
            return
        field, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if field == b"event":
            self._name = value.decode("utf-8", "replace") or MESSAGE
            return
        if field != b"data":
            return
        self._data.append(value)
        self._size += len(value) + 1
        if self._size > self._max:
            raise SseEventTooLarge(f"an SSE event is longer than {self._max} bytes")


def _line_end(buffer: bytearray, scan: int) -> tuple[int, int] | None:
    """``(end of line, start of the next)`` for the first line end at or
    after ``scan``."""
    lf = buffer.find(b"\n", scan)
    cr = buffer.find(b"\r", scan, lf if lf >= 0 else len(buffer))
    if cr >= 0:
        if cr + 1 == len(buffer):
            return None  # a CR at the end may be the first half of a CRLF
        return cr, cr + 2 if buffer[cr + 1] == 0x0A else cr + 1
    if lf >= 0:
        return lf, lf + 1
    return None


def decode_end(data: bytes) -> dict[str, Any]:
    """The error body of an ``end`` event as a WebSocket ``error`` message
    (``{"kind": "error", "error", "message"}``), which the streams handle alike."""
    try:
        body = json.loads(data)
    except ValueError as exc:
        raise SseProtocolError(f"an end event is not JSON: {exc}") from None
    if not isinstance(body, dict) or not isinstance(body.get("error"), str):
        raise SseProtocolError("an end event without an error code")
    return {"kind": "error", "error": body["error"], "message": str(body.get("message", ""))}


def decode_delta(data: bytes) -> dict[str, Any]:
    """A delta (or a ``synced`` event's message) from an event's data:
    standard base64 of a msgpack map."""
    try:
        raw = base64.b64decode(data, validate=True)
        delta = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except (binascii.Error, ValueError, msgpack.UnpackException) as exc:
        raise SseProtocolError(f"an event is not base64 msgpack: {exc}") from None
    if not isinstance(delta, dict):
        raise SseProtocolError("an event is not a msgpack map")
    return delta
