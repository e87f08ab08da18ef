"""Wire encoders shared by every server-side protocol: WebSocket frames
(RFC 6455) as a server writes them, msgpack and compact JSON.

Bottom layer: pure functions of their arguments, no I/O and no imports from
the rest of syncd, so :mod:`syncd.hub` (which encodes each delta once for
every subscriber), :mod:`syncd.ws` and :mod:`syncd.yjs` share one definition.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Final

import msgpack

WS_OPCODE_TEXT: Final = 0x1
WS_OPCODE_BINARY: Final = 0x2


def ws_header(opcode: int, length: int) -> bytes:
    """The header of one final, unmasked WebSocket frame (RFC 6455 5.2) with a
    payload of ``length`` bytes: a large payload is written after it in
    slices, never copied behind it (:mod:`syncd.http.feed`)."""
    first = 0x80 | opcode
    if length < 126:
        return struct.pack("!BB", first, length)
    if length < 65536:
        return struct.pack("!BBH", first, 126, length)
    return struct.pack("!BBQ", first, 127, length)


def ws_frame(opcode: int, payload: bytes) -> bytes:
    """One final, unmasked WebSocket frame (RFC 6455 5.2), as a server sends it."""
    return ws_header(opcode, len(payload)) + payload


def pack(obj: Any) -> bytes:
    """``obj`` as msgpack, bytes as bin (not str)."""
    return msgpack.packb(obj, use_bin_type=True)


def to_json(obj: Any) -> bytes:
    """``obj`` as compact UTF-8 JSON."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
