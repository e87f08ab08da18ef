"""A malformed request head is refused as soon as its bad byte or line is in,
by both parsers alike, not when the head ends or its time runs out.

llhttp refuses a byte that no request line or field name may hold as it reads
it; h11 judges a head only once it is whole, so the h11 adapter checks the
request line and the field lines as they arrive. A client whose head is
already refused gets its 400 and a close at once, whichever parser runs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from syncd.http.parser import NEED_DATA, ParseError
from syncd.http.parsers import make_parser
from tests.conftest import open_raw, read_response, read_until_closed

PARSERS = ("h11", "httptools")

_CODING = b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
_CHUNKED = _CODING + b"chunked\r\n\r\n"
REFUSED_AT_ONCE: list[tuple[str, bytes, int]] = [
    ("bad method byte", b"G(T", 400),
    ("bad method byte, line ended", b"G(T /a HTTP/1.1\r\n", 400),
    ("space first", b" GET /a", 400),
    ("bad target byte", b"GET /a\x80", 400),
    ("tab after the target", b"GET /a\tHTTP/1.1\r\n", 400),
    ("four parts", b"GET /a b HTTP/1.1\r\n", 400),
    ("four parts, line not ended", b"GET /a b", 400),
    ("not a version", b"GET /a XTTP/1.1", 400),
    ("space after the version", b"GET /a HTTP/1.1 \r\n", 400),
    ("cr in the version", b"GET /a HTTP/1.\r", 400),
    ("version of three digits", b"GET /a HTTP/1.10", 400),
    ("two-digit major version", b"GET /a HTTP/10", 400),
    ("cr after the name", b"GET /a HTTP/1.1\r\nHost: x\r\nX-A\r", 400),
    ("bad field name", b"GET /a HTTP/1.1\r\nBad[H]: x\r\n", 400),
    ("bad field name, line not ended", b"GET /a HTTP/1.1\r\nHost: x\r\nBad[", 400),
    ("space before the colon", b"GET /a HTTP/1.1\r\nHost : x\r\n", 400),
    ("no colon", b"GET /a HTTP/1.1\r\nHost: x\r\nX-A\r\n", 400),
    ("empty name", b"GET /a HTTP/1.1\r\n: x\r\n", 400),
    ("non-ascii name", b"GET /a HTTP/1.1\r\nX\x80", 400),
    ("unknown method, bad field name", b"FOO /a HTTP/1.1\r\nBad[H]: x\r\n", 400),
    ("relative target", b"GET a HTTP/1", 400),
    ("relative target, cut", b"GET a1", 400),
    ("scheme without slashes", b"GET http:a", 400),
    ("bad authority byte", b"GET http://x|", 400),
    ("bad connect authority byte", b"CONNECT x{", 400),
    ("two hosts", b"GET /a HTTP/1.1\r\nHost: x\r\nhost: y\r\nX", 400),
    ("length and coding", b"POST /a HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: gz", 400),
    (
        "coding and length",
        b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length:",
        400,
    ),
    ("signed length", b"POST /a HTTP/1.1\r\nContent-Length: +", 400),
    ("hex length", b"POST /a HTTP/1.1\r\nContent-Length: 0x", 400),
    ("empty length", b"POST /a HTTP/1.1\r\nContent-Length: \r\nH", 400),
    ("two numbers in a length", b"POST /a HTTP/1.1\r\nContent-Length: 3 4", 400),
    ("chunked twice", _CODING + b"chunked, chunked\r", 400),
    ("chunked then a comma", _CODING + b"chunked,\r", 400),
    ("chunked then gzip", _CODING + b"chunked, gzip\r", 400),
    ("chunked on two lines", _CODING + b"chunked\r\nTransfer-Encoding: chunked\r", 400),
    ("empty coding", _CODING + b"\r\nX", 400),
    ("chunked then more", _CODING + b"chunked, ", 400),
    ("bad chunk size", _CHUNKED + b"3x", 400),
    ("blank after a chunk size", _CHUNKED + b"3 ", 400),
    ("no chunk size", _CHUNKED + b";", 400),
    ("blank in a chunk extension", _CHUNKED + b"3;a b", 400),
    ("blank before a chunk extension", _CHUNKED + b"3;\t", 400),
    ("blank in a chunk extension's value", _CHUNKED + b"3;a=b c", 400),
    ("chunk extension ending in ;", _CHUNKED + b"3;a;\r", 400),
    ("empty chunk extension", _CHUNKED + b"3;\r", 400),
    ("chunk size past 64 bits", _CHUNKED + b"10000000000000000", 400),
    ("a field for a chunk size", _CHUNKED + b"3\r\nabc\r\nX", 400),
    ("blank in a trailer name", _CHUNKED + b"0\r\nX ", 400),
    ("trailer folding", _CHUNKED + b"0\r\nX: 1\r\n Y", 400),
    ("trailer length", _CHUNKED + b"0\r\nContent-Length:", 400),
    ("trailer without a colon", _CHUNKED + b"0\r\nX\r", 400),
    ("control in a trailer", _CHUNKED + b"0\r\nX: \x01", 400),
    ("version 2.0, two hosts", b"GET /a HTTP/2.0\r\nHost: x\r\nHost: y\r\nX", 505),
    ("version 2.0, bad field name", b"GET /a HTTP/2.0\r\nBad[H]: x\r\n", 505),
    ("version 2.0, space after it", b"GET /a HTTP/2.0 \r\n", 505),
]

STILL_WAITING: list[tuple[str, bytes]] = [
    ("two spaces", b"GET  /a"),
    ("line cut after the target", b"GET /a "),
    ("line cut in its version", b"GET /a HTTP/1"),
    ("line cut in its crlf", b"GET /a HTTP/1.1\r"),
    ("unknown method", b"FOO /a HTTP/1.1\r\nHost: x\r\n"),
    ("non-ascii value", b"GET /a HTTP/1.1\r\nX-A: \x80\r\n"),
    ("name cut", b"GET /a HTTP/1.1\r\nHost: x\r\nX-A"),
    ("empty value", b"GET /a HTTP/1.1\r\nHost: x\r\nX-A:"),
    ("blank line cut", b"GET /a HTTP/1.1\r\nHost: x\r\n\r"),
    ("scheme cut", b"GET http:/"),
    ("star target cut", b"OPTIONS *"),
    ("connect authority cut", b"CONNECT x:4"),
    ("length cut", b"POST /a HTTP/1.1\r\nContent-Length: 3 \r"),
    ("blank length cut", b"POST /a HTTP/1.1\r\nContent-Length: \t"),
    ("one host", b"GET /a HTTP/1.1\r\nHost: x\r\nHostname: y\r\n"),
    ("gzip then chunked", _CODING + b"gzip, chunked\r"),
    ("chunk size cut", _CHUNKED + b'3;a="b c"\r'),
    ("chunk cut", _CHUNKED + b"3\r\nab"),
    ("chunk extension cut", _CHUNKED + b'3;a="b'),
    ("quoted blank in a chunk extension", _CHUNKED + b'3;a="b c'),
    ("escape in a chunk extension cut", _CHUNKED + b'3;a="b\\'),
    ("chunk extensions cut", _CHUNKED + b"3;a=b;;=c;d="),
    ("chunk size of zeros cut", _CHUNKED + b"0" * 30),
    ("trailer cut", _CHUNKED + b"0\r\nX-A: 1\r\nX-B"),
]


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize(
    ("name", "data", "status"), REFUSED_AT_ONCE, ids=[c[0] for c in REFUSED_AT_ONCE]
)
def test_refused_before_the_head_ends(
    parser_name: str, name: str, data: bytes, status: int
) -> None:
    parser = make_parser(parser_name, 1000)
    parser.feed(data)
    event = parser.next_event()
    assert isinstance(event, ParseError) and event.status == status, event


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize("name", [c[0] for c in REFUSED_AT_ONCE])
def test_refused_when_fed_a_byte_at_a_time(parser_name: str, name: str) -> None:
    """The same answer when the head trickles in, at its last byte at the latest."""
    data, status = next((d, s) for n, d, s in REFUSED_AT_ONCE if n == name)
    parser = make_parser(parser_name, 1000)
    event: object = NEED_DATA
    for i in range(len(data)):
        parser.feed(data[i : i + 1])
        event = parser.next_event()
        if event is not NEED_DATA:
            break
    assert isinstance(event, ParseError) and event.status == status, event


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize(("name", "data"), STILL_WAITING, ids=[c[0] for c in STILL_WAITING])
def test_a_head_that_may_still_be_good_waits(parser_name: str, name: str, data: bytes) -> None:
    parser = make_parser(parser_name, 1000)
    parser.feed(data)
    assert parser.next_event() is NEED_DATA


@pytest.mark.parametrize(
    "data",
    [
        b"G(T /health/live HTTP/1.1\r\n",
        b"GET /health/live b HTTP/1.1\r\nHost: x\r\n",
        b"GET /health/live HTTP/1.1\r\nHost: x\r\nBad[H]: x\r\n",
    ],
    ids=["bad method byte", "four parts", "bad field name"],
)
async def test_answered_and_closed_before_the_head_ends(make_server: Any, data: bytes) -> None:
    """No CRLFCRLF ever comes: the 400 is sent long before the head's time
    bound (a minute here), and the connection closes."""
    server = await make_server(header_timeout_s=60)
    reader, writer = await open_raw(server.port)
    writer.write(data)
    async with asyncio.timeout(10):
        status, headers, _ = await read_response(reader)
    assert status == 400
    assert headers["connection"] == "close"
    writer.write_eof()
    assert await read_until_closed(reader) == b""
    writer.close()


GOOD_HEADS = [
    b"GET /a?b=1 HTTP/1.1\r\nHost: x\r\nX-A:  b c \r\nX-B:\r\nX-C: \x80\xff\r\n\r\n",
    b"GET  /a   HTTP/1.0\r\n\r\n",
    b"GET http://x:80/a HTTP/1.1\r\nHost: x\r\n\r\n",
    b"CONNECT x:443 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
    b"M-SEARCH /a HTTP/1.1\r\nHost: x\r\n!#$%&'*+-.^_`|~09az: 1\r\n\r\n",
    _CHUNKED
    + b'3;a="b\\" c";d\r\nabc\r\n00000000000000000000000000a\r\n0123456789\r\n0\r\nX: 1\r\n\r\n',
    _CODING + b"gzip, chunked\r\nContent-Type: x\r\n\r\n",
]


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize("head", GOOD_HEADS)
def test_no_prefix_of_a_good_head_is_refused(parser_name: str, head: bytes) -> None:
    for end in range(1, len(head)):
        parser = make_parser(parser_name, 1000)
        parser.feed(head[:end])
        assert parser.next_event() is NEED_DATA, head[:end]
