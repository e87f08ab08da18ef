"""Events that arrived before an SSE event past the client's bound are
delivered; then the stream ends with MessageTooLargeError.

The parser raised at the oversize event as it went through a chunk, and the
events that chunk had completed before it, whole deltas, were dropped with
the list holding them: one read may take several events at once (a batch's
deltas, written together). Now they are returned and the error comes next.

The parser on a single chunk, and a real server: a batch of two ops on a
register, the second's value over ``max_event_bytes``, both in the socket
before the reader reads on."""

from __future__ import annotations

import asyncio
import base64

import msgpack
import pytest

from syncd.client import AsyncClient, MessageTooLargeError
from syncd.client.sse import SseEventTooLarge, SseParser, decode_delta
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

MAX_EVENT_BYTES = 4096
LARGE_VALUE_CHARS = 8000
"""Over MAX_EVENT_BYTES once in base64 msgpack; the small value's event is far under."""

SETTLE_S = 0.5
"""Time for the server to write both deltas before the reader reads on, so
one read takes both (on a machine too loaded for that, the test passes
without showing anything, never fails for it)."""

WAIT_S = 20.0


def _event(delta: dict[str, object]) -> bytes:
    return b"data: " + base64.b64encode(msgpack.packb(delta)) + b"\n\n"


def test_the_parser_returns_the_events_before_an_oversize_one() -> None:
    small = {"kind": "op", "id": "lw:x", "seq": 2}
    parser = SseParser(100)
    chunk = _event(small) + b": ping\n" + b"data: " + b"A" * 200
    events = parser.feed(chunk)
    assert [decode_delta(e.data) for e in events] == [small]
    assert isinstance(parser.error, SseEventTooLarge)
    with pytest.raises(SseEventTooLarge):
        parser.feed(b"\n\n")


def test_the_parser_returns_the_events_before_an_oversize_line_in_one_chunk() -> None:
    small = {"kind": "op", "id": "lw:x", "seq": 2}
    parser = SseParser(100)
    chunk = _event(small) + b"data: " + b"A" * 200 + b"\n\n" + _event(small)
    assert [decode_delta(e.data) for e in parser.feed(chunk)] == [small]
    with pytest.raises(SseEventTooLarge):
        parser.feed(b"")


def test_an_oversize_event_alone_is_raised_at_once() -> None:
    parser = SseParser(100)
    with pytest.raises(SseEventTooLarge):
        parser.feed(b"data: " + b"A" * 200)


async def test_the_deltas_before_an_oversize_event_are_delivered(server: RunningServer) -> None:
    crdt_id = "lw:before-oversize"
    async with AsyncClient(server.url, make_token(2), NS) as client:
        await client.lwwregister_set(crdt_id, "start")
        stream = client.events(crdt_id, max_event_bytes=MAX_EVENT_BYTES)
        async with stream, asyncio.timeout(WAIT_S):
            snapshot = await anext(stream)
            assert snapshot["kind"] == "snapshot"
            await client.apply(
                crdt_id,
                [
                    {"op": "set", "value": "small"},
                    {"op": "set", "value": "x" * LARGE_VALUE_CHARS},
                ],
            )
            await asyncio.sleep(SETTLE_S)
            delta = await anext(stream)
            assert delta["kind"] == "op" and delta["seq"] == snapshot["seq"] + 1, delta
            assert delta["op"]["value"] == "small"
            with pytest.raises(MessageTooLargeError):
                await anext(stream)
            with pytest.raises(StopAsyncIteration):
                await anext(stream)
