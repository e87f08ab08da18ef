"""An incremental parser of the SSE stream (docs/protocol.md#the-sse-stream), no I/O.

Feed it bytes as they arrive; it returns the complete events' ``data``
payloads. The service writes ``data: <base64>`` and a blank line per event and
``: ping`` comments; the parser follows the general rules (``data`` lines of
one event joined by newlines, other fields and comments ignored, CR/LF/CRLF
line ends) so a proxy's reformatting does not break it.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

import msgpack

MAX_EVENT_BYTES: Final = 64 * 1024 * 1024
"""Bytes of one event (a snapshot of a large document, base64): bounds the
memory a broken or hostile server can make the client hold."""


class SseProtocolError(ValueError):
    pass


class SseEventTooLarge(SseProtocolError):
    pass


class SseParser:
    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buffer = bytearray()
        self._data: list[bytes] = []
        self._size = 0
        self._max = max_event_bytes

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data payloads of the events completed by ``chunk``."""
        self._buffer += chunk
        events: list[bytes] = []
        start = 0
        buffer = self._buffer
        while True:
            end = _line_end(buffer, start)
            if end is None:
                break
            line_end, next_start = end
            self._line(bytes(buffer[start:line_end]), events)
            start = next_start
        del buffer[:start]
        if len(buffer) + self._size > self._max:
            raise SseEventTooLarge(f"an SSE event is longer than {self._max} bytes")
        return events

    def _line(self, line: bytes, events: list[bytes]) -> None:
        if not line:
            if self._data:
                events.append(b"\n".join(self._data))
            self._data = []
            self._size = 0
            return
        if line.startswith(b":"):
            return
        name, _, value = line.partition(b":")
        if name != b"data":
            return
        if value.startswith(b" "):
            value = value[1:]
        self._data.append(value)
        self._size += len(value) + 1
        if self._size > self._max:
            raise SseEventTooLarge(f"an SSE event is longer than {self._max} bytes")


def _line_end(buffer: bytearray, start: int) -> tuple[int, int] | None:
    """``(end of line, start of the next)`` for the first line at ``start``."""
    lf = buffer.find(b"\n", start)
    cr = buffer.find(b"\r", start, lf if lf >= 0 else len(buffer))
    if cr >= 0:
        if cr + 1 == len(buffer):
            return None  # a CR at the end may be the first half of a CRLF
        return cr, cr + 2 if buffer[cr + 1] == 0x0A else cr + 1
    if lf >= 0:
        return lf, lf + 1
    return None


def decode_delta(data: bytes) -> dict[str, Any]:
    """A delta from an event's data: standard base64 of a msgpack map."""
    try:
        raw = base64.b64decode(data, validate=True)
        delta = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except (binascii.Error, ValueError, msgpack.UnpackException) as exc:
        raise SseProtocolError(f"an event is not base64 msgpack: {exc}") from None
    if not isinstance(delta, dict):
        raise SseProtocolError("an event is not a msgpack map")
    return delta
