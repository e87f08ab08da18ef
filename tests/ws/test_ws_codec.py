"""Message decoding limits and reply framing, without sockets."""

from __future__ import annotations

import json
import os
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncd.errors import ApiError
from syncd.ws.codec import MessageLimits, decode, encode

LIMITS = MessageLimits(max_bytes=4096, max_depth=8)
EXAMPLES = int(os.environ.get("SYNCD_HYPOTHESIS_EXAMPLES", "150"))


def _nested(depth: int) -> Any:
    """A message nested exactly ``depth`` deep (its own map counts as 1)."""
    value: Any = 1
    for _ in range(depth - 1):
        value = [value]
    return {"kind": "ping", "v": value}


def test_maps_decode_from_both_encodings() -> None:
    message = {"kind": "op", "id": "gc:x", "op": {"op": "increment"}, "ref": 1}
    assert decode(msgpack.packb(message), LIMITS) == message
    assert decode(json.dumps(message), LIMITS) == message


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",
        msgpack.packb([1]),
        msgpack.packb({"kind": "ping"}) + b"\x00",  # trailing bytes
        msgpack.packb({1: "int key"}),
        msgpack.packb({"kind": msgpack.ExtType(1, b"x")}),
        b"\xdb\xff\xff\xff\xff",  # a str header announcing 4 GiB
        b"\xdd\xff\xff\xff\xff",  # an array header announcing 4 billion items
        "",
        "[]",
        "{",
        '{"a": NaN}',
    ],
)
def test_malformed_messages_are_bad_requests(data: bytes | str) -> None:
    with pytest.raises(ApiError) as info:
        decode(data, LIMITS)
    assert info.value.status == 400 and info.value.code == "bad_request"


def test_depth_limit_is_exact_in_both_encodings() -> None:
    # The top-level map is depth 1, as for JSON bodies.
    fine, deep = _nested(LIMITS.max_depth), _nested(LIMITS.max_depth + 1)
    for encode_ in (msgpack.packb, json.dumps):
        assert decode(encode_(fine), LIMITS) == fine
        with pytest.raises(ApiError, match="deeper"):
            decode(encode_(deep), LIMITS)


def test_depth_is_checked_even_when_the_cheap_bound_is_exceeded_by_strings() -> None:
    # Many bytes that look like container headers inside a string: still fine.
    message = {"kind": "ping", "s": "\x80\x90" * 100}
    assert decode(msgpack.packb(message), LIMITS) == message


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
        ),
        max_leaves=20,
    )
)
def test_depth_decision_matches_a_reference(value: Any) -> None:
    message = {"kind": "ping", "v": value}

    def depth(obj: Any) -> int:
        if isinstance(obj, dict):
            return 1 + max((depth(v) for v in obj.values()), default=0)
        if isinstance(obj, list):
            return 1 + max((depth(v) for v in obj), default=0)
        return 0

    data = msgpack.packb(message)
    if len(data) > LIMITS.max_bytes:
        return
    if depth(message) > LIMITS.max_depth:
        with pytest.raises(ApiError):
            decode(data, LIMITS)
    else:
        assert decode(data, LIMITS) == message


def test_replies_are_final_unmasked_frames() -> None:
    frame = encode({"kind": "pong"}, binary=True)
    payload = msgpack.packb({"kind": "pong"})
    assert frame == bytes([0x82, len(payload)]) + payload
    text = encode({"kind": "pong"}, binary=False)
    assert text == b"\x81\x0f" + b'{"kind":"pong"}'
    big = encode({"kind": "x", "pad": "y" * 70000}, binary=True)
    assert big[0] == 0x82 and big[1] == 127


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError):
        MessageLimits(0, 1)
