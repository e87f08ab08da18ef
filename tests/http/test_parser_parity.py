"""Smuggling and malformed-request shapes get the same answer from both parsers.

The cases follow the categories of h11's and llhttp's own test suites
(framing headers, chunked encoding, header syntax, request line, versions),
written fresh for syncd. Each is checked sans-IO through the parser interface
and over a real socket.
"""

from __future__ import annotations

import pytest

from syncd.http.parser import ParseError
from syncd.http.parsers import make_parser
from syncd.http.request import Request
from tests.conftest import RunningServer, open_raw, read_response

OK = 0
CASES: list[tuple[str, bytes, int]] = [
    (
        "cl and te together",
        b"POST /health/live HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        400,
    ),
    (
        "differing cl",
        b"POST /health/live HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        400,
    ),
    (
        "repeated cl",
        b"POST /health/live HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
        400,
    ),
    ("cl list", b"POST /health/live HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\n\r\nabc", 400),
    ("negative cl", b"POST /health/live HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400),
    ("signed cl", b"POST /health/live HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\nabc", 400),
    (
        "huge cl",
        b"POST /health/live HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        400,
    ),
    (
        "bad chunk size",
        b"POST /health/live HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
        400,
    ),
    (
        "chunk without crlf",
        b"POST /health/live HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX0\r\n\r\n",
        400,
    ),
    (
        "chunk extension",
        b"POST /health/live HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\n\r\n",
        OK,
    ),
    (
        "gzip then chunked",
        b"POST /health/live HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        501,
    ),
    (
        "chunked not last",
        b"POST /health/live HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n",
        400,
    ),
    (
        "identity coding",
        b"POST /health/live HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n",
        501,
    ),
    ("space before colon", b"GET /health/live HTTP/1.1\r\nHost : x\r\n\r\n", 400),
    ("obsolete folding", b"GET /health/live HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", 400),
    ("bare lf", b"GET /health/live HTTP/1.1\nHost: x\n\n", 400),
    ("bad header name", b"GET /health/live HTTP/1.1\r\nHost: x\r\nBad[H]: x\r\n\r\n", 400),
    ("empty header name", b"GET /health/live HTTP/1.1\r\nHost: x\r\n: b\r\n\r\n", 400),
    ("nul in value", b"GET /health/live HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400),
    ("cr in value", b"GET /health/live HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", 400),
    ("tab in value", b"GET /health/live HTTP/1.1\r\nHost: x\r\nX-A: a\tb\r\n\r\n", OK),
    ("no host", b"GET /health/live HTTP/1.1\r\n\r\n", 400),
    ("two hosts", b"GET /health/live HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400),
    # RFC 9110 9.1, 15.6.2: a method the server does not recognise is 501
    # (methods are case-sensitive); llhttp refuses it as it reads it, h11 not.
    ("lowercase method", b"get /health/live HTTP/1.1\r\nHost: x\r\n\r\n", 501),
    ("unknown method", b"FOO /health/live HTTP/1.1\r\nHost: x\r\n\r\n", 501),
    ("rtsp method", b"SETUP /health/live HTTP/1.1\r\nHost: x\r\n\r\n", 501),
    ("unknown method, no host", b"FOO /health/live HTTP/1.1\r\n\r\n", 400),
    ("non-token method", b"G(T /health/live HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("known method no route takes", b"PROPFIND /health/live HTTP/1.1\r\nHost: x\r\n\r\n", OK),
    ("space in target", b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("http/0.9", b"GET /health/live\r\n\r\n", 400),
    ("http/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
    ("http/1.0", b"GET /health/live HTTP/1.0\r\n\r\n", OK),
    # Found by sending mutated requests to both parsers of a running server:
    ("control char in value", b"GET /health/live HTTP/1.1\r\nHost: x\r\nX-A: a\x0eb\r\n\r\n", 400),
    ("del in value", b"GET /health/live HTTP/1.1\r\nHost: x\r\nX-A: a\x7fb\r\n\r\n", 400),
    ("obs-text in value", b"GET /health/live HTTP/1.1\r\nHost: x\r\nX-A: a\xffb\r\n\r\n", OK),
    (
        "nul in transfer-encoding",
        b"POST /health/live HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \x00chunked\r\n\r\n0\r\n\r\n",
        400,
    ),
    ("target without slash", b"GET health/live HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("target starting with colon", b"GET :/health/live HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("target of a query only", b"GET ?a=1 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("absolute-form target", b"GET http://x/health/live HTTP/1.1\r\nHost: x\r\n\r\n", OK),
    ("asterisk-form target", b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", OK),
    (
        "empty transfer-encoding",
        b"POST /health/live HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \r\n\r\n0\r\n\r\n",
        400,
    ),
    ("empty lines before", b"\r\n\r\nGET /health/live HTTP/1.1\r\nHost: x\r\n\r\n", OK),
    # A version llhttp refuses as it reads the request line is answered for
    # that, whatever the fields that follow (RFC 9110 15.6.6).
    ("version 7.0, bad field", b"GET /health/live HTTP/7.0\r\nHost: x\r\nBad[H]: x\r\n\r\n", 505),
    ("version 7.0, no colon", b"GET /health/live HTTP/7.0\r\nHost: x\r\nfoo\r\n\r\n", 505),
    ("version 7.0, folding", b"GET /health/live HTTP/7.0\r\nHost: x\r\nX: a\r\n b\r\n\r\n", 505),
    ("version 7.0, bad target", b"GET a/b HTTP/7.0\r\nHost: x\r\nfoo\r\n\r\n", 400),
    (
        "version 7.0, large length",
        b"POST /health/live HTTP/7.0\r\nHost: x\r\nContent-Length: 5000\r\n\r\n",
        505,
    ),
    # RFC 9112 7.1: a chunk size is 1*HEXDIG, leading zeros and all.
    (
        "chunk size of 25 digits",
        b"POST /health/live HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"0" * 24
        + b"2\r\nab\r\n0\r\n\r\n",
        OK,
    ),
    (
        "last chunk of 25 digits",
        b"POST /health/live HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"0" * 25
        + b"\r\nX: 1\r\n\r\n",
        OK,
    ),
    (
        "chunk size past 64 bits",
        b"POST /health/live HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"f" * 25
        + b"\r\nab\r\n0\r\n\r\n",
        400,
    ),
    # RFC 9110 5.5: blanks (SP, HTAB) around a field value are not part of it.
    (
        "tab after chunked",
        b"POST /health/live HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\t\r\n\r\n0\r\n\r\n",
        OK,
    ),
    (
        "blanks after chunked",
        b"POST /health/live HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked \t \r\n\r\n0\r\n\r\n",
        OK,
    ),
]


def outcome(parser_name: str, data: bytes) -> int:
    parser = make_parser(parser_name, 1000)
    parser.feed(data)
    event = parser.next_event()
    if isinstance(event, ParseError):
        return event.status
    assert isinstance(event, Request), event
    return OK


@pytest.mark.parametrize(("name", "data", "status"), CASES, ids=[c[0] for c in CASES])
def test_same_answer_sans_io(name: str, data: bytes, status: int) -> None:
    assert outcome("h11", data) == status
    assert outcome("httptools", data) == status


@pytest.mark.parametrize(
    ("name", "data", "status"),
    [c for c in CASES if c[2] != OK],
    ids=[c[0] for c in CASES if c[2] != OK],
)
async def test_same_answer_over_the_socket(
    server: RunningServer, name: str, data: bytes, status: int
) -> None:
    reader, writer = await open_raw(server.port)
    writer.write(data)
    got, headers, _ = await read_response(reader)
    assert got == status
    assert headers["connection"] == "close"
    assert await reader.read() == b""
    writer.close()
