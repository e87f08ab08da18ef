"""Client messages in, server messages out: msgpack for binary frames, JSON for text.

Decoding is strict and bounded. A message is at most the body limit (the frame
layer enforces that before we get here); msgpack's own length limits are set
to that bound too, so a small frame cannot announce a huge string or array,
and nesting is bounded like JSON bodies (``SERVICE_JSON_MAX_DEPTH``). Anything
that is not a map of the right shape is a 400 ``bad_request`` ApiError, which
the session turns into an ``error`` message.

Server messages are framed here directly (final, unmasked frames), the same
way the hub frames deltas, so replies cost no wsproto call.
"""

from __future__ import annotations

from typing import Any, Final

import msgpack

from syncd.errors import bad_request
from syncd.http.request import parse_json
from syncd.wire import WS_OPCODE_BINARY, WS_OPCODE_TEXT, pack, to_json, ws_frame

# Bytes that can start a msgpack map or array: fixmap, fixarray, array 16/32,
# map 16/32. A message cannot nest deeper than it has such bytes, so only
# messages with more of them than the depth limit pay for the exact walk.
_CONTAINER_BYTES: Final = bytes(range(0x80, 0xA0)) + bytes(range(0xDC, 0xE0))


class MessageLimits:
    """What one client message may be: its size in bytes and its nesting depth."""

    __slots__ = ("max_bytes", "max_depth")

    def __init__(self, max_bytes: int, max_depth: int) -> None:
        if max_bytes < 1 or max_depth < 1:
            raise ValueError("message limits must be positive")
        self.max_bytes = max_bytes
        self.max_depth = max_depth


def _reject_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"msgpack extension type {code} is not allowed")


def _depth_exceeds(obj: Any, max_depth: int) -> bool:
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return True
        if type(item) is dict:
            children: Any = item.values()
        elif type(item) is list:
            children = item
        else:
            continue
        for child in children:
            if type(child) is dict or type(child) is list:
                stack.append((child, depth + 1))
    return False


def decode_msgpack(data: bytes, limits: MessageLimits) -> dict[str, Any]:
    bound = min(len(data), limits.max_bytes)
    try:
        obj = msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            ext_hook=_reject_ext,
            max_str_len=bound,
            max_bin_len=bound,
            max_array_len=bound,
            max_map_len=bound,
            max_ext_len=0,
        )
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        # Some carry no text (FormatError for a reserved byte): then their name.
        detail = str(exc) or type(exc).__name__
        raise bad_request(f"malformed msgpack: {detail}") from None
    if type(obj) is not dict:
        raise bad_request("a message must be a map")
    if len(data) - len(
        data.translate(None, _CONTAINER_BYTES)
    ) > limits.max_depth and _depth_exceeds(obj, limits.max_depth):
        raise bad_request(f"message nesting deeper than {limits.max_depth}")
    return obj


def decode_json(data: str, limits: MessageLimits) -> dict[str, Any]:
    obj = parse_json(data, limits.max_depth)
    if type(obj) is not dict:
        raise bad_request("a message must be a JSON object")
    return obj


def decode(data: bytes | str, limits: MessageLimits) -> dict[str, Any]:
    """A client message: ``bytes`` from a binary frame, ``str`` from a text frame."""
    if isinstance(data, str):
        return decode_json(data, limits)
    return decode_msgpack(data, limits)


def encode(message: dict[str, Any], binary: bool) -> bytes:
    """A server message as one complete frame, in the client's encoding."""
    if binary:
        return ws_frame(WS_OPCODE_BINARY, pack(message))
    return ws_frame(WS_OPCODE_TEXT, to_json(message))
