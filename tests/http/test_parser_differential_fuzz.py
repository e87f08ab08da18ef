"""A differential fuzz of the two parsers: well-formed requests, mutated in
the ways parsers disagree on (obsolete folding, bare CR, Content-Length
repeated, signed or zero-padded, absolute-form and odd targets, long and
unknown methods, versions, transfer codings, chunk lines, trailers, Upgrade
offers), pipelined and cut into reads at random places. Both parsers must
make the same requests of the same bytes and refuse with the same status.

The peer's close ends every case: a parser that waits for the rest of a head
llhttp has already refused (h11 reads a head whole) then answers it too, so
only a different answer counts, not a different moment. Then the shapes the
fuzz found, each in the table."""

from __future__ import annotations

import random

import pytest

from syncd.http.parser import CLOSED, CONTINUE, NEED_DATA, ParseError
from syncd.http.parsers import make_parser
from syncd.http.request import Request
from tests.conftest import RunningServer, open_raw, read_response

PARSERS = ("h11", "httptools")


def outcome(parser_name: str, reads: list[bytes]) -> list[object]:
    """The requests a parser makes of ``reads`` (method, target, body and
    whether the connection stays open), ``100`` for a 100 Continue, and how
    it ends: a refusal's status, ``closed``, or ``close`` after a request
    that closes the connection (the server reads no further)."""
    parser = make_parser(parser_name, 1000)
    seen: list[object] = []
    for data in reads:
        parser.feed(data)
        while (event := parser.next_event()) is not NEED_DATA:
            if isinstance(event, ParseError):
                return [*seen, event.status]
            if event is CLOSED:
                return [*seen, "closed"]
            if event is CONTINUE:
                seen.append(100)
                continue
            assert isinstance(event, Request), event
            seen.append((event.method, event.path, event.query_string, event.body))
            if not event.keep_alive:
                return [*seen, "close"]
            parser.start_next_cycle()
    return seen


_BASES = (
    b"GET /a?b=1 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
    b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"GET /a HTTP/1.0\r\n\r\n",
    b"PUT /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n{}",
)
_CHOICES: dict[str, tuple[bytes, ...]] = {
    "fold": (b" x", b"\tx", b" "),
    "length": (b"003", b"+3", b" 3 ", b"3 ", b"\t3", b"0x3", b"3.0", b"0" * 22 + b"3", b"3,3", b""),
    "target": (
        b"http://x/a",
        b"http://x",
        b"https://x:80/a?b",
        b"HTTP://X/a",
        b"http://x?a",
        b"ftp://x/a",
        b"http://[::1]/a",
        b"http://u:p@x/a",
        b"http:/a",
        b"http:///a",
        b"//x/a",
        b"http://x/a#f",
        b"/a#f",
        b"/a%zz",
        b"/a\x7f",
        b"/a\x80",
        b"/a|b",
        b"/a{b}",
        b'/a"',
        b"/a<",
        b"/a\\b",
        b"/?",
        b"/??",
        b"*",
        b"*?a",
        b"a",
    ),
    "method": (
        b"GETGETGET",
        b"X" * 20,
        b"X" * 200,
        b"G",
        b"GE",
        b"POS",
        b"PATCH",
        b"M-SEARCH",
        b"DELETEX",
        b"get",
        b"GeT",
        b"SOURCE",
        b"QUERY",
        b"PRI",
        b"CONNECT",
        b"SETUP",
    ),
    "version": (
        b"HTTP/1.0",
        b"HTTP/2.0",
        b"HTTP/1.9",
        b"HTTP/0.9",
        b"HTTP/10.1",
        b"http/1.1",
        b"HTTP/1",
        b"HTTP/1.1 ",
        b"HTTP/7.0",
        b"HTTP/1.10",
        b"HTTPS/1.1",
        b"HTTP/a.b",
        b"HTP/1.1",
    ),
    "field": (
        b"X-A : b",
        b"X-A:b",
        b"X-A:",
        b"X-A:  b  ",
        b"X\x00A: b",
        b"X A: b",
        b"X-A: b\x80",
        b"X-A",
        b":",
        b"X-A:\tb\t",
        b"Connection: close",
        b"Connection: upgrade",
        b"Upgrade: h2c\r\nConnection: Upgrade",
        b"Upgrade: websocket",
        b"Expect: 100-continue",
        b"Expect: foo",
        b"Host: y",
        b"Content-Length: 0",
        b"Transfer-Encoding: chunked",
        b"Transfer-Encoding: gzip",
    ),
    "coding": (
        b" chunked",
        b"chunked ",
        b"CHUNKED",
        b"chunked,",
        b",chunked",
        b"chunked, chunked",
        b"identity, chunked",
        b"chunked;q=1",
        b"\tchunked\t",
        b"x-y, chunked",
    ),
    "chunk": (
        b"03",
        b"3 ",
        b"3\t",
        b"3;a",
        b'3;a="b"',
        b"0" * 24 + b"3",
        b"+3",
        b"-3",
        b"3x",
        b"0x3",
        b"3;a=b;",
        b" 3",
        b"3;\ta",
    ),
    "last": (
        b"0\r\nX: 1\r\n\r\n",
        b"0\r\nX : 1\r\n\r\n",
        b"0\r\n X: 1\r\n\r\n",
        b"0\r\nX: 1\r\n Y\r\n\r\n",
        b"0\r\nContent-Length: 5\r\n\r\n",
        b"0\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"0\r\nX\r\n\r\n",
        b"0\r\n\r\r\n",
        b"0" * 25 + b"\r\n\r\n",
        b"0;a\r\n\r\n",
        b"0\r\n \r\n\r\n",
    ),
}


def _mutate(rng: random.Random, request: bytes) -> bytes:
    kind = rng.choice([*_CHOICES, "cr", "flip", "drop"])
    lines = request.split(b"\r\n")
    if kind in ("fold", "field"):
        lines.insert(rng.randrange(1, max(2, len(lines) - 2)), rng.choice(_CHOICES[kind]))
        return b"\r\n".join(lines)
    if kind == "length":
        return request.replace(
            b"Content-Length: 3", b"Content-Length: " + rng.choice(_CHOICES[kind])
        )
    if kind == "target":
        return request.replace(b" /a", b" " + rng.choice(_CHOICES[kind]), 1)
    if kind == "method":
        return rng.choice(_CHOICES[kind]) + request[request.find(b" ") :]
    if kind == "version":
        version = rng.choice(_CHOICES[kind])
        return request.replace(b"HTTP/1.1", version, 1).replace(b"HTTP/1.0", version, 1)
    if kind == "coding":
        coding = b"Transfer-Encoding: " + rng.choice(_CHOICES[kind])
        return request.replace(b"Transfer-Encoding: chunked", coding)
    if kind == "chunk":
        return request.replace(b"\r\n3\r\n", b"\r\n" + rng.choice(_CHOICES[kind]) + b"\r\n")
    if kind == "last":
        return request.replace(b"0\r\n\r\n", rng.choice(_CHOICES[kind]))
    at = rng.randrange(len(request))
    if kind == "cr":
        return request[:at] + b"\r" + request[at:]
    if kind == "flip":
        return request[:at] + bytes([rng.randrange(256)]) + request[at + 1 :]
    return request[:at] + request[at + 1 :]  # drop


def _case(rng: random.Random) -> list[bytes]:
    requests = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        request = rng.choice(_BASES)
        for _ in range(rng.choice((1, 1, 2))):
            request = _mutate(rng, request)
        requests.append(request)
    data = b"".join(requests)
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.choice((0, 0, 1, 2, 3)))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)] + [b""]


# The mutations run in a few seconds (both parsers in-process, no sockets).
# They add at most a few fields: the field count limit has its own cases
# (FIELD_LIMIT below, each read whole and cut at every byte).
SEEDS = range(8)
CASES_PER_SEED = 1500


@pytest.mark.parametrize("seed", SEEDS)
def test_both_parsers_answer_mutated_requests_alike(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(CASES_PER_SEED):
        reads = _case(rng)
        assert outcome("h11", reads) == outcome("httptools", reads), reads


_CHUNKED = b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"
_TAB = b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\t\r\n\r\n2\r\nab\r\n0\r\n\r\n"
_H2C = b"POST /a HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
_H2C_CHUNKED = (
    b"POST /a HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade\r\nHost: x\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
)
_GET = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
_POSTED = ("POST", "/a", "", b"abc")
_GOT = ("GET", "/a", "", b"")
FOUND: list[tuple[str, list[bytes], list[object]]] = [
    # Both framings, one of them an unknown coding: the framing first.
    (
        "gzip and a length",
        [b"POST /a HTTP/1.1\r\nTransfer-Encoding: gzip\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"],
        [400],
    ),
    # RFC 9110 8.6: 1*DIGIT; h11 takes 20 digits at most, llhttp any.
    (
        "length of 23 digits",
        [b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: " + b"0" * 22 + b"3\r\n\r\nabc" + _GET],
        [_POSTED, _GOT],
    ),
    # Past Python's 4,300 digits for int() of a decimal string: read, as llhttp reads it.
    (
        "length of 4,401 digits",
        [b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: " + b"0" * 4400 + b"3\r\n\r\nabc" + _GET],
        [_POSTED, _GOT],
    ),
    # Mended (zeros dropped) after its head was judged in part: judged again.
    (
        "length of 23 digits, cut, then a request",
        [
            b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: " + b"0" * 22 + b"3\r",
            b"\n\r\nabcPOST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
        ],
        [_POSTED, _POSTED],
    ),
    # Past 64 bits a length is no number to llhttp (400), not one too large (413).
    (
        "length past 64 bits",
        [b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 18446744073709551616\r\n\r\n"],
        [400],
    ),
    (
        "length past 64 bits, zeros first",
        [b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 00050000000000000000003\r\n\r\nabc"],
        [400],
    ),
    (
        "length of 64 bits",
        [b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 18446744073709551615\r\n\r\n"],
        [413],
    ),
    # Trailers: folding, framing fields and a bare CR are refused, as in a head.
    ("trailer folding", [_CHUNKED + b"0\r\nX: 1\r\n Y\r\n\r\n"], [400]),
    ("trailer length", [_CHUNKED + b"0\r\nContent-Length: 5\r\n\r\n"], [400]),
    ("trailer coding", [_CHUNKED + b"0\r\nTransfer-Encoding: chunked\r\n\r\n"], [400]),
    ("trailer bare cr", [_CHUNKED + b"0\r\n\r\r\n"], [400]),
    # The target before the version, the version before the fields.
    ("star query, version 7.0", [b"GET *?b=1 HTTP/7.0\r\nHost: x\r\n\r\n"], [400]),
    (
        "star query, gzip",
        [b"GET *?b=1 HTTP/1.1\r\nTransfer-Encoding: gzip\r\nHost: x\r\n\r\n"],
        [400],
    ),
    (
        "connect star query",
        [b"CONNECT *?b=1 HTTP/1.1\r\nHost: x\r\n\r\n"],
        [("CONNECT", "*", "b=1", b"")],
    ),
    ("version 2.0, two hosts", [b"GET /a HTTP/2.0\r\nHost: x\r\nHost: x\r\n\r\n"], [505]),
    (
        "star query, version 2.0, folding",
        [b"POST *?a HTTP/2.0\r\nHost: x\r\n\tx\r\nContent-Length: 3\r\n\r\nabc"],
        [400],
    ),
    (
        "star query, version 2.0, two hosts",
        [b"GET *?a HTTP/2.0\r\nHost: x\r\nHost: x\r\n\r\n"],
        [400],
    ),
    ("star query, version 2.0, closed in the head", [b"GET *?a HTTP/2.0\r\nHos", b""], [400]),
    (
        "version 2.0, bare cr",
        [b"POST /a HTTP/2.0\r\nHost: x\r\nContent-\rLength: 3\r\n\r\nabc"],
        [505],
    ),
    ("version 2.0, closed in the head", [b"GET /a HTTP/2.0\r\nHos", b"t: x\r\n\r", b""], [505]),
    ("version 7.0, a space after", [b"PUT /a HTTP/7.0 \r\nHost: x\r\n\r\n"], [505]),
    ("version 7.0, bare lf", [b"GET /a HTTP/7.0\n", b"\r\n\r\n"], [505]),
    ("version 7.0, line not ended", [b"GET /a HTTP/7.0"], [505]),
    ("version 1.x", [b"GET /a HTTP/1.x\r\n"], [400]),
    ("no version slash", [b"GET /a HTTP1.0\r\n"], [400]),
    # PRI: llhttp waits for an HTTP/2 preface after "PRI <target> HTTP/1.x".
    ("pri, no fields", [b"PRI /a HTTP/1.0\r\n\r\n"], [501]),
    ("pri, no fields, cut", [b"PRI /a HTTP/1.0\r", b"\n\r\n"], [501]),
    ("pri, fields in the next read", [b"PRI /a HTTP/1.1\r\n", b"Host: x\r\n\r\n"], [501]),
    ("pri, line cut", [b"PRI /a HTT", b"P/1.0\r", b"\nX: 1\r\n\r\n"], [501]),
    ("pri, bad version", [b"PRI", b" /a HT", b"TP/1.00\r\n\r\n", b""], [400]),
    # An RTSP method, refused by llhttp at the version, the line cut.
    ("rtsp method, cut", [b"SET", b"UP /a HT", b"TP/1.0\r\n\r\n"], [501]),
    (
        "unknown method cut, after a cut head",
        [
            b"PUT /a HTTP/1.1\r\nHost: x\r\nContent-",
            b"Length: 2\r\n\r\n{}GE",
            b" /a HTTP/1.1\r\nHost: x\r\n\r\n",
        ],
        [("PUT", "/a", "", b"{}"), 501],
    ),
    # llhttp reads a CONNECT target as an authority up to a "/" or "?", and
    # refuses there what RFC 3986 3.2 has no place for.
    ("connect brace", [b"CONNECT {a HT", b"TP/", b"1.0\r\n\r\n", b""], [400]),
    ("connect bar", [b"CONNECT a|b HTTP/1.1\r\nHost: x\r\n\r\n"], [400]),
    ("connect star hash", [b"CONNECT *# HTTP/1.1\r\nHost: x\r\n\r\n"], [400]),
    (
        "connect bar in the path",
        [b"CONNECT a/b|c HTTP/1.0\r\n\r\n"],
        [("CONNECT", "a/b|c", "", b""), "close"],
    ),
    # CONNECT with a body: read as h11 reads it (RFC 9112 6.3), then on.
    (
        "connect with a body",
        [b"CONNECT /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc" + _GET],
        [("CONNECT", "/a", "", b"abc"), _GOT],
    ),
    (
        "connect with a body, cut",
        [
            b"CONNECT /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nab",
            b"cG /a HTTP/1.1\r\nHost: x\r\n\r\n",
        ],
        [("CONNECT", "/a", "", b"abc"), 501],
    ),
    # After the body of an Upgrade offer we do not take.
    ("h2c, then version 2.0", [_H2C + b"PUT /a HTTP/2.0\r\nHost: x\r\n\r\n"], [_POSTED, 505]),
    ("h2c, then unknown method", [_H2C + b"FOO /a HTTP/1.1\r\nHost: x\r\n\r\n"], [_POSTED, 501]),
    (
        "h2c, then unknown method cut",
        [_H2C[:1], _H2C[1:] + b"F", b"OO /a HTTP/1.1\r\nHost: x\r\n\r\n"],
        [_POSTED, 501],
    ),
    (
        "chunked h2c, then unknown method cut",
        [_H2C_CHUNKED[:9], _H2C_CHUNKED[9:] + b"F", b"OO /a HTTP/1.1\r\nHost: x\r\n\r\n"],
        [_POSTED, 501],
    ),
    (
        "h2c, then unknown method cut twice",
        [_H2C[:-1], b"cF", b"OO /a HTTP/1", b".1\r\nHost: x\r\n\r\n"],
        [_POSTED, 501],
    ),
    (
        "h2c, then connect with a body",
        [_H2C + b"CONNECT /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc" + _GET],
        [_POSTED, ("CONNECT", "/a", "", b"abc"), _GOT],
    ),
    # Blanks around a list member are SP and HTAB (RFC 9110 5.6.1), not
    # every character Unicode calls a space (latin-1 NEL and NBSP).
    (
        "nbsp before chunked",
        [b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \xa0chunked\r\n\r\n0\r\n\r\n"],
        [501],
    ),
    (
        "nel after chunked",
        [b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\x85\r\n\r\n0\r\n\r\n"],
        [501],
    ),
    (
        "nbsp before keep-alive",
        [b"GET /a HTTP/1.0\r\nConnection: \xa0keep-alive\r\n\r\n" + _GET],
        [_GOT, "close"],
    ),
    (
        "nel after close",
        [b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\x85\r\n\r\n" + _GET, b""],
        [_GOT, _GOT, "closed"],
    ),
    (
        "nel before 100-continue",
        [b"PUT /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect:\x85100-continue\r\n\r\nabc"],
        [("PUT", "/a", "", b"abc")],
    ),
    # A chunk's data ends in CRLF: h11 skips the two bytes after it unread.
    (
        "bare lf after chunk data, long last chunk",
        [_CHUNKED[:-8] + b"3\r\nabc\n" + b"0" * 25 + b"\r\n\r\n" + _GET],
        [400],
    ),
    (
        "bare lf after chunk data, long last chunk, cut",
        [_CHUNKED[:-8] + b"3\r\nab", b"c\n" + b"0" * 25 + b"\r\n\r\n" + _GET],
        [400],
    ),
    # chunked<TAB> after a chunked body cut in two.
    (
        "tab after a cut chunked body",
        [_CHUNKED, b"0\r\n\r\n" + _TAB + _GET],
        [_POSTED, ("POST", "/a", "", b"ab"), _GOT],
    ),
    (
        "foo after a cut chunked body, then cut",
        [_CHUNKED + b"0", b"\r\n\r\nG", b"9T /a HTTP/1.1\r\nHost: x\r\n\r\n"],
        [_POSTED, 501],
    ),
]


_HUNDRED_FIELDS = b"Host: x\r\n" + b"".join(b"X-%d: v\r\n" % n for n in range(99))
_HUNDRED_WITH_LENGTH = b"Host: x\r\nContent-Length: 3\r\n" + b"".join(
    b"X-%d: v\r\n" % n for n in range(98)
)


def _past_limit(after: bytes, fields: bytes = _HUNDRED_FIELDS, line: bytes = b"HTTP/1.1") -> bytes:
    """A head of MAX_HEADERS fields (``fields``), then ``after``."""
    return b"POST /a " + line + b"\r\n" + fields + after


# Past MAX_HEADERS fields the count is judged when the 101st field line is
# whole (its LF in), before what that line or any later one says (a second
# Host, a transfer coding, a list member), but after what llhttp refuses as
# its bytes arrive: a name that is no token, a control character, a bare CR
# or LF, folding, a Content-Length that is no number, repeated or with a
# Transfer-Encoding, chunked before another coding. Both parsers, wherever
# the reads are cut.
FIELD_LIMIT: list[tuple[str, bytes, int]] = [
    ("101st field", _past_limit(b"X: v\r\n\r\n"), 431),
    ("101st field cut", _past_limit(b"X: v\r\n"), 431),
    ("101st field not ended", _past_limit(b"X: v\r"), 400),
    ("101st field a second host", _past_limit(b"Host: y\r\n\r\n"), 431),
    ("101st field gzip", _past_limit(b"Transfer-Encoding: gzip\r\n\r\n"), 431),
    ("101st field an empty coding", _past_limit(b"Transfer-Encoding: ,chunked\r\n\r\n"), 431),
    ("101st field chunked, gzip", _past_limit(b"Transfer-Encoding: chunked, gzip\r\n\r\n"), 400),
    ("101st field a control character", _past_limit(b"X: a\x01b\r\n\r\n"), 400),
    ("101st field a bad length", _past_limit(b"Content-Length: x\r\n\r\n"), 400),
    ("101st field no token", _past_limit(b"Bad[: x\r\n\r\n"), 400),
    ("101st field folded", _past_limit(b" x\r\n\r\n"), 400),
    ("101st field bare lf", _past_limit(b"X: v\n\r\n"), 400),
    (
        "101st field a second length",
        _past_limit(b"Content-Length: 3\r\n\r\nabc", _HUNDRED_WITH_LENGTH),
        400,
    ),
    (
        "101st field a coding after a length",
        _past_limit(b"Transfer-Encoding: chunked\r\n\r\n", _HUNDRED_WITH_LENGTH),
        400,
    ),
    ("101st field an empty length", _past_limit(b"Content-Length: \r\n\r\n"), 431),
    (
        "101st field an empty second length",
        _past_limit(b"Content-Length: \r\n\r\n", _HUNDRED_WITH_LENGTH),
        431,
    ),
    ("101st field an empty coding value", _past_limit(b"Transfer-Encoding: \r\n\r\n"), 431),
    (
        "chunked, then an empty coding value the 101st field",
        _past_limit(
            b"Transfer-Encoding: \r\n\r\n",
            b"Transfer-Encoding: chunked\r\n" + _HUNDRED_FIELDS[:-9],
        ),
        431,
    ),
    (
        "chunked, then gzip the 101st field",
        _past_limit(
            b"Transfer-Encoding: gzip\r\n\r\n",
            b"Transfer-Encoding: chunked\r\n" + _HUNDRED_FIELDS[:-9],
        ),
        400,
    ),
    (
        "100th field an empty coding value",
        _past_limit(b"X: v\r\n\r\n", _HUNDRED_FIELDS[:-9] + b"Transfer-Encoding: \r\n"),
        400,
    ),
    (
        "an empty coding member before the 101st field",
        _past_limit(b"X: v\r\n\r\n", b"Transfer-Encoding: ,chunked\r\n" + _HUNDRED_FIELDS[:-9]),
        431,
    ),
    (
        "chunked and a tab twice, the second the 101st field",
        _past_limit(
            b"Transfer-Encoding: \tchunked\t\r\n\r\n",
            b"Transfer-Encoding: \tchunked\t\r\n" + _HUNDRED_FIELDS[:-9],
        ),
        431,
    ),
    ("a star query, 101st field", b"GET *?a HTTP/1.1\r\n" + _HUNDRED_FIELDS + b"X: v\r\n\r\n", 400),
    ("102nd field no token", _past_limit(b"X: v\r\nBad[: x\r\n\r\n"), 431),
    ("102nd field a second host", _past_limit(b"X: v\r\nHost: y\r\n\r\n"), 431),
    ("102nd field a control character", _past_limit(b"X: v\r\nY: \x01\r\n\r\n"), 431),
    ("102nd field a bad length", _past_limit(b"X: v\r\nContent-Length: x\r\n\r\n"), 431),
    ("blank line a bare cr", _past_limit(b"X: v\r\n\r\r\n"), 431),
    ("version 2.0, 101st field", _past_limit(b"X: v\r\n\r\n", line=b"HTTP/2.0"), 505),
    ("version 2.0, 102nd field no token", _past_limit(b"X: v\r\n[\r\n", line=b"HTTP/2.0"), 505),
]
FOUND += [(name, [data, b""], [status]) for name, data, status in FIELD_LIMIT]


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize(("name", "data", "status"), FIELD_LIMIT, ids=[c[0] for c in FIELD_LIMIT])
def test_field_limit_wherever_the_reads_are_cut(
    parser_name: str, name: str, data: bytes, status: int
) -> None:
    """Each FIELD_LIMIT case cut in two at every byte, and a byte at a time
    from the 100th field on."""
    for cut in range(1, len(data)):
        assert outcome(parser_name, [data[:cut], data[cut:], b""]) == [status], cut
    start = data.rindex(b"\r\nX-9") + 2
    trickled = [data[:start], *(data[at : at + 1] for at in range(start, len(data))), b""]
    assert outcome(parser_name, trickled) == [status]


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize(("name", "reads", "expected"), FOUND, ids=[c[0] for c in FOUND])
def test_shapes_the_fuzz_found(
    parser_name: str, name: str, reads: list[bytes], expected: list[object]
) -> None:
    assert outcome(parser_name, reads) == expected


@pytest.mark.parametrize(
    ("reads", "status"),
    [
        ([b"PRI /health/live HTTP/1.0\r\n\r\n"], 501),
        ([b"GET /health/live HTTP/7.0"], 505),
        (
            [
                b"GET /health/live HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\nContent-Length: 0\r\n\r\n"
            ],
            400,
        ),
        ([b"GET /health/live HTTP/1.1\r\n" + _HUNDRED_FIELDS + b"X: v\r\nBad[: x\r\n\r\n"], 431),
    ],
    ids=["pri", "version 7.0 before the line ends", "gzip and a length", "past the field limit"],
)
async def test_refusals_over_the_socket(
    server: RunningServer, reads: list[bytes], status: int
) -> None:
    """Answered at once (the client sends nothing more), and closed."""
    reader, writer = await open_raw(server.port)
    for data in reads:
        writer.write(data)
    got, headers, body = await read_response(reader)
    assert got == status, body
    assert headers["connection"] == "close"
    assert await reader.read() == b""
    writer.close()


async def test_connect_with_a_body_over_the_socket(server: RunningServer) -> None:
    """Its body is read (404 for the route), the next request is served."""
    reader, writer = await open_raw(server.port)
    writer.write(
        b"CONNECT /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
        b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    assert (await read_response(reader))[0] == 404
    assert (await read_response(reader))[0] == 200
    writer.close()
