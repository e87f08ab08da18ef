"""Requests pipelined behind one another cost each about what one costs alone:
a request's head is judged for its own bytes, not for everything held behind
it. The h11 side counted the line ends of the whole held buffer for every
request (and ``field_limit_end`` counted and searched it again once the count
passed MAX_HEADERS): 240 KB of 30-byte GETs held at once cost 213 us a
request against 51 for a few, and a client could make the server scan up to
512 KiB (MAX_PIPELINE_BYTES and a read past it) for each 39-byte request."""

from __future__ import annotations

import time

import pytest

from syncd.http.parser import NEED_DATA
from syncd.http.parsers import make_parser
from syncd.http.protocol import MAX_PIPELINE_BYTES
from syncd.http.request import Request

PARSERS = ("h11", "httptools")
REQUEST = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
FEW = 500
"""Requests held at once whose cost per request is the yardstick."""
MANY = MAX_PIPELINE_BYTES // len(REQUEST)
"""As many as the connection holds before it stops reading (about 9,000)."""
SLOWER = 2.0
"""How much more a request may cost among MANY held than among FEW: about
1.3x now (what is left is h11's copy of the held bytes at each request's
start); it was over 4x."""


def _cost_per_request(parser_name: str, count: int) -> float:
    """CPU seconds per request to read ``count`` requests held at once (best of three)."""
    best = float("inf")
    for _ in range(3):
        parser = make_parser(parser_name, 1000)
        started = time.process_time()
        parser.feed(REQUEST * count)
        for _ in range(count):
            event = parser.next_event()
            assert isinstance(event, Request), event
            parser.start_next_cycle()
        best = min(best, time.process_time() - started)
        assert parser.next_event() is NEED_DATA
    return best / count


@pytest.mark.parametrize("parser_name", PARSERS)
def test_a_request_held_behind_many_costs_about_what_it_costs_alone(parser_name: str) -> None:
    few = _cost_per_request(parser_name, FEW)
    many = _cost_per_request(parser_name, MANY)
    assert many < SLOWER * few, (many * 1e6, few * 1e6)
