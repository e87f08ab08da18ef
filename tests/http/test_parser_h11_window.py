"""The h11 side gives h11 the bytes received a window at a time
(``_WINDOW_BYTES``) and holds the rest: every answer is the same as with all
of them given at once, whatever the window. Pipelines of every shape the
h11 side judges (heads near the limits, bodies, chunk lines and trailers,
Expect, upgrades, empty lines, refusals of each kind, the peer's close),
read under several cuts, give the same events with a window of a few bytes
as with one larger than all they hold."""

from __future__ import annotations

import random

import pytest

from syncd.http import h11_parser
from syncd.http.parser import CLOSED, CONTINUE, MAX_HEAD_BYTES, NEED_DATA, ParseError
from syncd.http.request import Request

GET = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
CHUNKED = b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
SHAPES = [
    GET,
    GET * 300,
    b"\r\n" * 5000,
    b"GET  /spaced   HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /" + b"a" * (MAX_HEAD_BYTES - 40) + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /" + b"a" * (MAX_HEAD_BYTES + 10) + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /h HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(120)) + b"\r\n",
    b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 20000\r\n\r\n" + b"b" * 20000,
    b"POST /z HTTP/1.1\r\nHost: x\r\nContent-Length: " + b"0" * 25 + b"3\r\n\r\nabc",
    b"POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello",
    CHUNKED + b"3;a=b\r\nabc\r\n2710\r\n" + b"c" * 10000 + b"\r\n0\r\nX-T: 1\r\n\r\n",
    CHUNKED + b"3;a=" + b"e" * 20000 + b"\r\nabc\r\n0\r\n\r\n",
    CHUNKED + b"0" * 30 + b"3\r\nabc\r\n0\r\n\r\n",
    CHUNKED + b"0\r\nX: " + b"t" * (MAX_HEAD_BYTES - 100) + b"\r\n\r\n",
    CHUNKED + b"0\r\nX: " + b"t" * (MAX_HEAD_BYTES + 100) + b"\r\n\r\n",
    CHUNKED + b"3\r\nabc\r\n0\r\nX: a\nY: b\r\n\r\n",
    CHUNKED + b"3\r\nabc\n0\r\n\r\n",
    CHUNKED + b"3\r\nabc\r\n0\r\nX: a\x01\r\nY b\r\n\r\n",
    b"GET /bad HTTP/1.1\nHost: x\r\n\r\n",
    b"GET /f HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n",
    b"GET /c HTTP/1.1\r\nHost: x\r\nX: \x01\r\n\r\n",
    b"GET /c HTTP/1.1\r\nX: \x01\r\nY: " + b"a" * 100 + b"\nZ: b\r\n\r\n",
    b"GET /ten HTTP/1.0\r\nHost: x\r\n\r\n",
    b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
]
"""Requests (and what is refused), pipelined in every order below."""
WINDOWS = (1, 7, 4096)
ALL_AT_ONCE = 1 << 40
"""A window larger than any pipeline: every byte given to h11 as it comes."""


def _events(data: bytes, cuts: list[int], eof: bool, busy: bool) -> list[object]:
    """What the parser answers to ``data`` read in pieces cut at ``cuts``
    (then the peer's close, if ``eof``), as the connection reads it: events
    after each read (after the last one only if ``busy``: all came while a
    request was answered), what is held, and the bytes after an upgrade."""
    parser = h11_parser.H11Parser(100_000)
    seen: list[object] = []
    reads = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    reads += [b""] if eof else []
    for at, read in enumerate(reads):
        parser.feed(read)
        seen.append((parser.buffered(), parser.in_progress()))
        if busy and at < len(reads) - 1:
            continue
        while (event := parser.next_event()) is not NEED_DATA:
            if event is CONTINUE:
                seen.append(("100", parser.continue_head().path))
                continue
            if isinstance(event, ParseError):
                return [*seen, (event.status, event.message, event.headers)]
            if event is CLOSED:
                return [*seen, "closed"]
            assert isinstance(event, Request), event
            seen.append((event.method, event.path, event.headers, event.body, event.keep_alive))
            if event.upgrade:
                return [*seen, parser.trailing_data()]
            parser.start_next_cycle()
            seen.append((parser.buffered(), parser.in_progress()))
        seen.append((parser.buffered(), parser.in_progress()))
    return seen


def _pipelines() -> list[tuple[bytes, list[int], bool, bool]]:
    rng = random.Random(5)
    pipelines: list[tuple[bytes, list[int], bool, bool]] = [
        (shape + GET, [], False, False) for shape in SHAPES
    ]
    for _ in range(60):
        data = b"".join(rng.choice(SHAPES) for _ in range(rng.randint(1, 6)))
        if rng.random() < 0.3:
            data = data[: rng.randrange(len(data))]  # ends in the middle of one
        cuts = sorted(rng.sample(range(1, len(data)), min(3, len(data) - 1)))
        for reads in ([], cuts):
            pipelines.append((data, reads, rng.random() < 0.4, rng.random() < 0.5))
    return pipelines


@pytest.mark.parametrize("window", WINDOWS)
def test_every_window_gives_the_answers_of_all_bytes_given_at_once(
    monkeypatch: pytest.MonkeyPatch, window: int
) -> None:
    pipelines = _pipelines()
    monkeypatch.setattr(h11_parser, "_WINDOW_BYTES", ALL_AT_ONCE)
    want = [_events(*pipeline) for pipeline in pipelines]
    monkeypatch.setattr(h11_parser, "_WINDOW_BYTES", window)
    for pipeline, answers in zip(pipelines, want, strict=True):
        assert _events(*pipeline) == answers, pipeline[0][:200]
