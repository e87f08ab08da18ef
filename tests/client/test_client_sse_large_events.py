"""The SSE parser's work is linear in what it is fed: it used to scan its
whole unfinished line again for a line end at every chunk, quadratic in one
event's size (an 8 MB snapshot in 64-byte chunks: some 15 s of CPU)."""

from __future__ import annotations

import base64
import time

import msgpack

from syncd.client.sse import SseEvent, SseParser, decode_delta

LARGE_EVENT_BYTES = 8 * 1024 * 1024
SMALL_CHUNK_BYTES = 64
CPU_BUDGET_S = 5.0
"""Far above a linear parse's fraction of a second even on a loaded
machine, far below the old parser's rescanning of 8 MB per 64 bytes."""


def _chunks(stream: bytes, size: int) -> list[bytes]:
    return [stream[i : i + size] for i in range(0, len(stream), size)]


def test_a_large_event_in_small_chunks_parses_whole() -> None:
    delta = {"kind": "snapshot", "id": "gc:big", "seq": 3, "state": "x" * 300_000}
    data = base64.b64encode(msgpack.packb(delta))
    # Line ends of every kind, so a CR or CRLF falls on chunk edges too.
    stream = (
        b": ping\r\n\r\nevent: synced\rdata: " + data + b"\r\n\r\n"
        b"data: " + data + b"\rdata: tail\r\r"
        b"data: " + data + b"\n\n"
    )
    for size in (1000, 1001, 4093):
        parser = SseParser()
        events: list[SseEvent] = []
        for chunk in _chunks(stream, size):
            events += parser.feed(chunk)
        assert [e.name for e in events] == ["synced", "message", "message"]
        assert decode_delta(events[0].data) == delta
        assert events[1].data == data + b"\ntail"
        assert decode_delta(events[2].data) == delta


def test_a_large_event_in_small_chunks_costs_linear_work() -> None:
    stream = b"data: " + b"A" * LARGE_EVENT_BYTES + b"\n\n"
    parser = SseParser()
    events: list[SseEvent] = []
    started = time.process_time()
    for i, chunk in enumerate(_chunks(stream, SMALL_CHUNK_BYTES)):
        events += parser.feed(chunk)
        if i % 1024 == 0:  # stop a quadratic parser early rather than wait it out
            assert time.process_time() - started < CPU_BUDGET_S, f"at byte {i * SMALL_CHUNK_BYTES}"
    assert time.process_time() - started < CPU_BUDGET_S
    assert len(events) == 1 and len(events[0].data) == LARGE_EVENT_BYTES
