"""A head, a trailer section or a chunk line trickled in a byte per read
costs about what it costs whole: each read is judged for its own bytes, not
for all those held so far. The h11 side judged a line not yet whole (a
field, a request line, a chunk line) from its start at each read: a 16 KiB
field line a byte at a time cost about 60 us a read (13 for a 2 KiB one), a
chunk line 190; about 3 us at any length now."""

from __future__ import annotations

import time

import pytest

from syncd.http.parser import MAX_HEAD_BYTES, NEED_DATA
from syncd.http.parsers import make_parser
from syncd.http.request import Request

PARSERS = ("h11", "httptools")
SHORT = 2048
"""The line length of the head whose cost per byte is the yardstick."""
SLOWER = 2.5
"""How much more a byte of a line eight times as long may cost (it cost
four to five times more when each read judged the line so far)."""


def _head(line: int) -> bytes:
    return b"GET /a HTTP/1.1\r\nHost: x\r\nX-A: " + b"v" * line + b"\r\n\r\n"


def _trailers(line: int) -> bytes:
    return (
        b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n"
        b"X-A: " + b"v" * line + b"\r\n\r\n"
    )


def _target(line: int) -> bytes:
    return b"GET /" + b"a" * line + b" HTTP/1.1\r\nHost: x\r\n\r\n"


def _chunk_extension(line: int) -> bytes:
    return (
        b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;a=" + b"b" * line + b"\r\nabc\r\n0\r\n\r\n"
    )


def _cost_per_byte(parser_name: str, data: bytes) -> float:
    """CPU seconds per byte to read ``data`` a byte at a time (the best of three)."""
    best = float("inf")
    for _ in range(3):
        parser = make_parser(parser_name, 1000)
        started = time.process_time()
        for at in range(len(data)):
            parser.feed(data[at : at + 1])
            event = parser.next_event()
        best = min(best, time.process_time() - started)
        assert isinstance(event, Request), event
        assert parser.next_event() is NEED_DATA
    return best / len(data)


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize(
    "shape",
    [_head, _trailers, _target, _chunk_extension],
    ids=["head", "trailers", "target", "chunk extension"],
)
def test_a_long_line_trickled_costs_about_its_length(parser_name: str, shape: object) -> None:
    assert callable(shape)
    long = MAX_HEAD_BYTES - 200
    short_cost = _cost_per_byte(parser_name, shape(SHORT))
    long_cost = _cost_per_byte(parser_name, shape(long))
    assert long_cost < SLOWER * short_cost, (long_cost * 1e6, short_cost * 1e6)
