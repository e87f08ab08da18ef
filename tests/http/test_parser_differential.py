"""Shapes found by a differential run of the two parsers on the same bytes:
each gets one answer whatever the parser (SERVICE_HTTP_PARSER)."""

from __future__ import annotations

import asyncio
import json

import pytest

from syncd.http.parser import CONTINUE, MAX_HEAD_BYTES, NEED_DATA, ParseError
from syncd.http.parsers import make_parser
from syncd.http.request import Request
from tests.conftest import ADMIN, RunningServer, open_raw, read_response
from tests.http.test_parser_parity import OK, outcome

PARSERS = ("h11", "httptools")


def _chunked(trailers: bytes) -> bytes:
    return (
        b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n0\r\n" + trailers + b"\r\n"
    )


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize(
    "trailers",
    [
        b"X-T: 1\r\n",
        b"Host: y\r\n",
        b"Authorization: Bearer t\r\nContent-Type: text/plain\r\n",
    ],
    ids=["plain", "host", "authorization"],
)
def test_trailer_fields_are_not_headers(parser_name: str, trailers: bytes) -> None:
    """RFC 9110 6.5.1: a trailer field is not merged into the header section."""
    parser = make_parser(parser_name, 1000)
    parser.feed(_chunked(trailers))
    event = parser.next_event()
    assert isinstance(event, Request), event
    assert event.headers == {"host": "x", "transfer-encoding": "chunked"}
    assert event.body == b"abc"


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize(
    ("size", "status"), [(MAX_HEAD_BYTES - 1000, None), (2 * MAX_HEAD_BYTES, 431)]
)
def test_trailer_section_is_bounded(parser_name: str, size: int, status: int | None) -> None:
    """A trailer section arriving piecemeal is bounded like a head (h11's
    incomplete-event bound, the same number on llhttp's side)."""
    data = _chunked(b"X-T: " + b"a" * size + b"\r\n")
    parser = make_parser(parser_name, 1000)
    event: object = NEED_DATA
    for start in range(0, len(data), 1000):
        parser.feed(data[start : start + 1000])
        event = parser.next_event()
        if event is not NEED_DATA:
            break
    if status is None:
        assert isinstance(event, Request), event
    else:
        assert isinstance(event, ParseError) and event.status == status, event


async def test_trailer_authorization_does_not_authenticate(server: RunningServer) -> None:
    """An admin token in the trailers of a chunked request is no token."""
    body = b'{"client_id": 1}'
    reader, writer = await open_raw(server.port)
    writer.write(
        b"POST /v1/namespaces/app/tokens HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        + f"{len(body):x}\r\n".encode()
        + body
        + b"\r\n0\r\nAuthorization: Bearer "
        + ADMIN.encode()
        + b"\r\n\r\n"
    )
    status, _, answer = await read_response(reader)
    assert status == 401, answer
    assert json.loads(answer)["error"] == "missing_token"
    writer.close()


GZIP = b"Transfer-Encoding: gzip\r\n"
SAME_ANSWER: list[tuple[str, bytes, int]] = [
    ("version 3.0", b"GET /health/live HTTP/3.0\r\nHost: x\r\n\r\n", 505),
    ("version 9.1", b"GET /health/live HTTP/9.1\r\nHost: x\r\n\r\n", 505),
    ("version 1.2", b"GET /health/live HTTP/1.2\r\nHost: x\r\n\r\n", 400),
    ("star and fragment", b"OPTIONS *# HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("star and query", b"OPTIONS *?a HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("star star", b"OPTIONS ** HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("gzip, bad version token", b"POST / H+TTP/1.1\r\nHost: x\r\n" + GZIP + b"\r\n", 400),
    ("gzip, bad field name", b"POST / HTTP/1.1\r\nHost: x\r\nBad[H]: x\r\n" + GZIP + b"\r\n", 400),
    ("gzip, bad target", b"POST /a\x80 HTTP/1.1\r\nHost: x\r\n" + GZIP + b"\r\n", 400),
    ("gzip, relative target", b"POST a/b HTTP/1.1\r\nHost: x\r\n" + GZIP + b"\r\n", 400),
    ("gzip, version 3.0", b"POST / HTTP/3.0\r\nHost: x\r\n" + GZIP + b"\r\n", 505),
    ("gzip, duplicate host", b"POST / HTTP/1.1\r\nHost: x\r\nHost: y\r\n" + GZIP + b"\r\n", 400),
    ("gzip, no host", b"POST / HTTP/1.1\r\n" + GZIP + b"\r\n", 501),
    ("gzip", b"POST / HTTP/1.1\r\nHost: x\r\n" + GZIP + b"\r\n", 501),
    (
        "bare cr in a coding",
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\xdc\r\n\r\n0\r\n\r\n",
        400,
    ),
]


@pytest.mark.parametrize(("name", "data", "status"), SAME_ANSWER, ids=[c[0] for c in SAME_ANSWER])
def test_same_answer_sans_io(name: str, data: bytes, status: int) -> None:
    assert outcome("h11", data) == status
    assert outcome("httptools", data) == status


@pytest.mark.parametrize(
    ("name", "data", "status"), SAME_ANSWER[:6], ids=[c[0] for c in SAME_ANSWER[:6]]
)
async def test_same_answer_over_the_socket(
    server: RunningServer, name: str, data: bytes, status: int
) -> None:
    reader, writer = await open_raw(server.port)
    writer.write(data)
    got, headers, body = await read_response(reader)
    assert got == status, body
    assert headers["connection"] == "close"
    writer.close()


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize(
    "expect",
    [
        b"Expect: 100-continue\r\n",
        b"Expect: 100-Continue\r\n",
        b"Expect: 100-continue, foo\r\n",
        b"Expect: 100-continue\r\nExpect: 100-continue\r\n",
    ],
    ids=["plain", "case", "list", "twice"],
)
def test_expect_continue_in_a_list(parser_name: str, expect: bytes) -> None:
    """RFC 9110 10.1.1: Expect is a list; a client that asks for 100-continue
    among other members waits for it all the same (and h11 sends it)."""
    parser = make_parser(parser_name, 1000)
    parser.feed(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n" + expect + b"\r\n")
    assert parser.next_event() is CONTINUE
    assert parser.continue_head().path == "/a"
    parser.feed(b"{}")
    event = parser.next_event()
    assert isinstance(event, Request) and event.body == b"{}"


async def test_expect_continue_in_a_list_over_the_socket(server: RunningServer) -> None:
    reader, writer = await open_raw(server.port)
    writer.write(
        b"POST /v1/tokens HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
        b"Content-Type: application/json\r\nAuthorization: Bearer " + ADMIN.encode() + b"\r\n"
        b"Expect: 100-continue, foo\r\n\r\n"
    )
    assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"{}")
    status, _, _ = await read_response(reader)
    assert status == 400  # routed and its token taken (a 100 only then), the body refused
    writer.close()


TARGET_CASES: list[tuple[str, bytes, int]] = [
    ("fragment in authority", b"GET http://h#80/health/live HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("quote in authority", b'GET http://h:80"/health/live HTTP/1.1\r\nHost: x\r\n\r\n', 400),
    ("brace in authority", b"GET http://h{x}/health/live HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("userinfo", b"GET http://u@h/health/live HTTP/1.1\r\nHost: x\r\n\r\n", OK),
    ("bad target, version 8.1", b"GET ht-//h/a HTTP/8.1\r\nHost: x\r\n\r\n", 400),
    (
        "bad target, huge length",
        b"POST a/b HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n",
        400,
    ),
]


@pytest.mark.parametrize(("name", "data", "status"), TARGET_CASES, ids=[c[0] for c in TARGET_CASES])
def test_same_answer_for_targets(name: str, data: bytes, status: int) -> None:
    """An absolute form's authority is held to what llhttp takes, and a
    malformed target is answered before the version and the fields, as
    llhttp answers it."""
    assert outcome("h11", data) == status
    assert outcome("httptools", data) == status


async def test_fragment_in_authority_over_the_socket(server: RunningServer) -> None:
    """``http://h#80/health/live`` has no path (the rest is a fragment): 400,
    not the route ``/health/live``."""
    reader, writer = await open_raw(server.port)
    writer.write(TARGET_CASES[0][1])
    status, _, body = await read_response(reader)
    assert status == 400, body
    writer.close()


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize(
    ("line", "status"),
    [
        (b"GET  /health/live HTTP/1.1", OK),
        (b"GET /health/live   HTTP/1.1", OK),
        (b"GET /health/live HTTP/1.1 ", 400),
        (b" GET /health/live HTTP/1.1", 400),
        (b"GET /health  live HTTP/1.1", 400),
    ],
    ids=["before target", "after target", "trailing", "leading", "inside target"],
)
def test_spaces_in_the_request_line(parser_name: str, line: bytes, status: int) -> None:
    """Runs of spaces between the three parts are one space (llhttp reads
    them so, RFC 9112 3 allows it); anywhere else they are refused."""
    assert outcome(parser_name, line + b"\r\nHost: x\r\n\r\n") == status


async def test_spaces_in_the_request_line_over_the_socket(server: RunningServer) -> None:
    reader, writer = await open_raw(server.port)
    writer.write(b"GET  /health/live  HTTP/1.1\r\nHost: x\r\n\r\n" * 2)
    for _ in range(2):
        status, _, body = await read_response(reader)
        assert status == 200, body
    writer.close()


CHUNK_LINES: list[tuple[bytes, int]] = [
    (b"2", OK),
    (b"00000000000000002", OK),
    (b"2;a", OK),
    (b"2;a=b;c=d", OK),
    (b'2;a="b c"', OK),
    (b"2;;a", OK),
    (b"2 ", 400),
    (b"2;a=b ", 400),
    (b"2; a=b", 400),
    (b"2;a\x00=b", 400),
    (b"2;a=b?", 400),
    (b"2;a,b", 400),
    (b"2;", 400),
    (b"1ffffffffffffffff", 400),
]


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize("piece", [0, 1, 5], ids=["whole", "bytewise", "by5"])
@pytest.mark.parametrize(
    ("line", "status"), CHUNK_LINES, ids=[repr(line)[2:-1] for line, _ in CHUNK_LINES]
)
def test_chunk_lines(parser_name: str, piece: int, line: bytes, status: int) -> None:
    """A chunk line (the second of the body) is judged alike, however the
    bytes arrive: hex digits, then ``;`` extensions of tokens or quoted
    strings, no blanks, a size within 64 bits."""
    data = (
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n"
        + line
        + b"\r\nab\r\n0\r\n\r\n"
    )
    if line == b"1ffffffffffffffff":
        data = data.replace(b"\r\nab\r\n0\r\n\r\n", b"\r\nab")  # refused before the body
    assert _fed(parser_name, data, piece) == status


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize("piece", [0, 1, 5], ids=["whole", "bytewise", "by5"])
@pytest.mark.parametrize(
    ("trailers", "status"),
    [
        (b"\r\n", OK),
        (b"X: 1\r\n\r\n", OK),
        (b"X: 1\n\r\n", 400),
        (b"\n", 400),
        (b"X: \x7f\r\n\r\n", 400),
    ],
    ids=["none", "one", "bare lf", "bare lf blank line", "control"],
)
def test_trailer_lines(parser_name: str, piece: int, trailers: bytes, status: int) -> None:
    data = (
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n"
        + trailers
    )
    assert _fed(parser_name, data, piece) == status


def _fed(parser_name: str, data: bytes, piece: int) -> int:
    """The outcome of ``data`` fed whole (``piece`` 0) or in pieces of that size."""
    parser = make_parser(parser_name, 1000)
    event: object = NEED_DATA
    for start in range(0, len(data), piece or len(data)):
        parser.feed(data[start : start + (piece or len(data))])
        event = parser.next_event()
        if event is not NEED_DATA:
            break
    if isinstance(event, ParseError):
        return event.status
    assert isinstance(event, Request), event
    return OK


async def test_chunk_extension_over_the_socket(server: RunningServer) -> None:
    reader, writer = await open_raw(server.port)
    writer.write(
        b"POST /health/live HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2;a=b c\r\n{}\r\n0\r\n\r\n"
    )
    status, headers, _ = await read_response(reader)
    assert status == 400
    assert headers["connection"] == "close"
    writer.close()


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize(
    ("trailer", "keep_alive"),
    [
        (b"Connection: close\r\n", False),
        (b"connection: Keep-Alive, Close\r\n", False),
        (b"Connection: closed\r\n", True),
        (b"X-Connection: close\r\n", True),
    ],
    ids=["close", "list", "closed", "other field"],
)
def test_trailer_connection_close(parser_name: str, trailer: bytes, keep_alive: bool) -> None:
    """llhttp takes a trailer ``Connection: close`` (it refuses what follows),
    so both parsers close the connection after that request's answer."""
    parser = make_parser(parser_name, 1000)
    parser.feed(_chunked(trailer) + b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    event = parser.next_event()
    assert isinstance(event, Request), event
    assert event.keep_alive is keep_alive


async def test_trailer_connection_close_over_the_socket(server: RunningServer) -> None:
    reader, writer = await open_raw(server.port)
    writer.write(
        _chunked(b"Connection: close\r\n").replace(b"POST /a", b"POST /health/live")
        + b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    status, headers, _ = await read_response(reader)
    assert status == 405
    assert headers["connection"] == "close"
    assert await reader.read() == b""
    writer.close()


def _events(parser_name: str, reads: list[bytes]) -> list[object]:
    """What a parser makes of ``reads`` fed one by one: each request as
    (method, path, body), then a refusal's status, if any."""
    parser = make_parser(parser_name, 1000)
    seen: list[object] = []
    for data in reads:
        parser.feed(data)
        while (event := parser.next_event()) is not NEED_DATA:
            if isinstance(event, ParseError):
                return [*seen, event.status]
            if isinstance(event, Request):
                seen.append((event.method, event.path, event.body))
                parser.start_next_cycle()
    return seen


_GET = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
_FOO = b"FOO /a HTTP/1.1\r\nHost: x\r\n\r\n"
_TAB = b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\t\r\n\r\n2\r\nab\r\n0\r\n\r\n"
_CHUNKED = b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n"
_GOT = ("GET", "/a", b"")
_POSTED = ("POST", "/a", b"ab")
READS: list[tuple[str, list[bytes], list[object]]] = [
    # An unknown method in the read that completes a request begun earlier
    # (llhttp does not say where that one ended): 501 all the same.
    ("foo after a head cut at its blank line", [_GET[:-2], _GET[-2:] + _FOO], [_GOT, 501]),
    ("foo after a head cut in its blank line", [_GET[:-1], _GET[-1:] + _FOO], [_GOT, 501]),
    ("foo after a head cut in a field", [_GET[:20], _GET[20:] + _FOO], [_GOT, 501]),
    (
        "foo after a head cut, two between",
        [_GET[:20], _GET[20:] + _GET * 2 + _FOO],
        [_GOT] * 3 + [501],
    ),
    (
        "foo after a head cut, then a body",
        [b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2", b"\r\n\r\nab" + _FOO],
        [_POSTED, 501],
    ),
    (
        "foo after a chunked head cut",
        [_CHUNKED[:40], _CHUNKED[40:] + b"0\r\n\r\n" + _FOO],
        [_POSTED, 501],
    ),
    ("foo after a chunked body cut", [_CHUNKED, b"0\r\n\r\n" + _FOO], [_POSTED, 501]),
    (
        "foo after a chunked body cut, trailers",
        [_CHUNKED, b"0\r\nX: 1\r\n\r\n" + _FOO],
        [_POSTED, 501],
    ),
    (
        "foo after a chunked body cut in its end",
        [_CHUNKED + b"0\r\n", b"\r\n" + _FOO],
        [_POSTED, 501],
    ),
    (
        "malformed after a chunked body cut",
        [_CHUNKED, b"0\r\n\r\nG(T /a HTTP/1.1\r\n\r\n"],
        [_POSTED, 400],
    ),
    # Transfer-Encoding "chunked<TAB>" (RFC 9110 5.5: the tab is not the value's).
    ("tab, whole", [_TAB], [_POSTED]),
    ("tab, pipelined", [_GET + _TAB + _GET], [_GOT, _POSTED, _GOT]),
    ("tab, head cut", [_TAB[:30], _TAB[30:] + _GET], [_POSTED, _GOT]),
    ("tab, blank line cut", [_TAB[:57], _TAB[57:] + _GET], [_POSTED, _GOT]),
    ("tab, blank line cut late", [_TAB[:58], _TAB[58:] + _GET], [_POSTED, _GOT]),
    ("tab, body cut", [_TAB[:62], _TAB[62:] + _GET], [_POSTED, _GOT]),
    ("tab, bytewise", [_TAB[i : i + 1] for i in range(len(_TAB))] + [_GET], [_POSTED, _GOT]),
    ("tab, bad chunk", [_TAB.replace(b"2\r\nab", b"zz\r\nab")], [400]),
    ("tab, then foo", [_TAB + _FOO], [_POSTED, 501]),
    ("tab, after a head cut", [_GET[:20], _GET[20:] + _TAB + _GET], [_GOT, _POSTED, _GOT]),
    ("tab, many pipelined", [_TAB * 200 + _GET], [_POSTED] * 200 + [_GOT]),
]


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize(("name", "reads", "events"), READS, ids=[c[0] for c in READS])
def test_same_events_however_the_reads_fall(
    parser_name: str, name: str, reads: list[bytes], events: list[object]
) -> None:
    assert _events(parser_name, reads) == events


async def test_unknown_method_after_a_cut_head_over_the_socket(server: RunningServer) -> None:
    """The read that ends a request's head also brings an unknown method: 501."""
    reader, writer = await open_raw(server.port)
    writer.write(b"GET /health/live HTTP/1.1\r\nHost: x\r\n")
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.write(b"\r\nFOO /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _, _ = await read_response(reader)
    assert status == 200
    status, headers, body = await read_response(reader)
    assert status == 501, body
    assert json.loads(body)["error"] == "not_implemented"
    assert headers["connection"] == "close"
    assert await reader.read() == b""
    writer.close()


@pytest.mark.parametrize(
    ("coding", "zeros"),
    [(b"chunked\t", b""), (b"chunked", b"0" * 30)],
    ids=["tab after chunked", "size of 32 digits"],
)
async def test_chunked_bodies_are_read_over_the_socket(
    server: RunningServer, coding: bytes, zeros: bytes
) -> None:
    """The body is read (the token is issued from it), twice on one connection."""
    body = b'{"client_id": 1, "permissions": {"read": ["*"]}}'
    reader, writer = await open_raw(server.port)
    request = (
        b"POST /v1/namespaces/app/tokens HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + ADMIN.encode()
        + b"\r\nContent-Type: application/json\r\nTransfer-Encoding: "
        + coding
        + b"\r\n\r\n"
        + zeros
        + f"{len(body):x}\r\n".encode()
        + body
        + b"\r\n0\r\n\r\n"
    )
    writer.write(request * 2)
    for _ in range(2):
        status, _, answer = await read_response(reader)
        assert status == 200, answer
        assert "token" in json.loads(answer)
    writer.close()
