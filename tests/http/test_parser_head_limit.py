"""The 16 KiB head limit, one rule for both parsers wherever the reads are cut.

A head is its bytes from its request line's first to its blank line's last
(empty lines before it not counted). One longer than MAX_HEAD_BYTES is
answered for its first MAX_HEAD_BYTES bytes: what is wrong in them (as if
the client had stopped there; the version first, as ever), else 431. The
first problem in byte order wins: nothing after the limit is read.

Before, h11's side counted what it held while a head was incomplete but a
whole head's target and fields, llhttp's side its target and fields as
llhttp handed them over: whether a later line's own error or the 431 came
first, and whether a head near the limit passed at all, depended on the
parser and on where the reads were cut."""

from __future__ import annotations

import random

import pytest

from syncd.http.parser import CLOSED, CONTINUE, MAX_HEAD_BYTES, NEED_DATA, ParseError
from syncd.http.parsers import make_parser
from syncd.http.request import Request
from tests.conftest import RunningServer, open_raw, read_response

PARSERS = ("h11", "httptools")
GOT = ("GET", "/a", "", b"")
GOT_Y = ("GET", "/y", "", b"")


def outcome(parser_name: str, reads: list[bytes]) -> list[object]:
    """As in test_parser_differential_fuzz, with room for a body past the limit."""
    parser = make_parser(parser_name, 1 << 20)
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
            parser.start_next_cycle()
    return seen


def answers_when_cut(data: bytes, rng: random.Random, near: list[int]) -> set[str]:
    """What both parsers answer ``data`` fed whole and cut at random four
    times, each time also at one of ``near`` (cut points near a limit):
    one answer when they agree whatever the cuts."""
    answers = set()
    for _ in range(4):
        cuts = set(rng.sample(range(1, len(data)), rng.choice((0, 1, 2, 5))))
        cuts.add(rng.choice(near))
        points = sorted(cuts)
        reads = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
        for parser_name in PARSERS:
            answers.add(repr(outcome(parser_name, [*reads, b""])))
    return answers


def head(size: int, line: bytes = b"GET /a HTTP/1.1", field: bytes = b"X-F: ") -> bytes:
    """A head of ``size`` bytes: ``line``, Host, then one long field."""
    start = line + b"\r\nHost: x\r\n" + field
    return start + b"v" * (size - len(start) - 4) + b"\r\n\r\n"


def at(data: bytes, where: int, byte: bytes) -> bytes:
    """``data`` with its byte at ``where`` made ``byte``."""
    return data[:where] + byte + data[where + 1 :]


def short_fields(size: int) -> bytes:
    """A head of ``size`` bytes of ``a:b`` fields (each measured one byte
    more than it is, as a target and fields were measured)."""
    data = b"GET /a HTTP/1.1\r\nHost: x\r\n" + b"".join(
        b"A%d:%s\r\n" % (n, b"b" * 160) for n in range(97)
    )
    filler = size - len(data) - len(b"Z:\r\n\r\n")
    return data + b"Z:" + b"z" * filler + b"\r\n\r\n"


def spaced(size: int) -> bytes:
    """A head of ``size`` bytes, mostly blanks before a field's value (not
    measured, as llhttp skips them)."""
    start = b"GET /a HTTP/1.1\r\nHost: x\r\nX-F:"
    return start + b" " * (size - len(start) - 5) + b"v\r\n\r\n"


_GETS = b"GET /y HTTP/1.1\r\nHost: x\r\n\r\n" * 5
_UPLOAD = b"POST /z HTTP/1.1\r\nHost: x\r\nContent-Length: 20000\r\n\r\n" + b"z" * 20000
_UPLOADED = ("POST", "/z", "", b"z" * 20000)
M = MAX_HEAD_BYTES
CASES: list[tuple[str, bytes, list[object]]] = [
    ("at the limit", head(M), [GOT]),
    ("one byte past", head(M + 1), [431]),
    ("far past", head(3 * M), [431]),
    ("a control character the last byte within", at(head(M + 10), M - 1, b"\x01"), [400]),
    ("a control character the first byte past", at(head(M + 10), M, b"\x01"), [431]),
    ("a bare CR the last byte within", at(head(M + 10), M - 1, b"\r"), [431]),
    ("a bare LF the last byte within", at(head(M + 10), M - 1, b"\n"), [400]),
    ("a bad name past the limit", head(M + 10)[:-4] + b"\r\nBad[: x\r\n\r\n", [431]),
    ("gzip past the limit", head(M + 10)[:-2] + b"Transfer-Encoding: gzip\r\n\r\n", [431]),
    ("gzip within, past the limit", head(M + 10, field=b"Transfer-Encoding: gzip\r\nX: "), [431]),
    ("a second host within", head(M + 10, field=b"Host: y\r\nX: "), [400]),
    ("version 2.0", head(M + 10, line=b"GET /a HTTP/2.0"), [505]),
    ("version 2.0 at the limit", head(M, line=b"GET /a HTTP/2.0"), [505]),
    ("unknown method", head(M + 10, line=b"FOO /a HTTP/1.1"), [431]),
    ("unknown method at the limit", head(M, line=b"FOO /a HTTP/1.1"), [501]),
    ("spaces in the request line", head(M + 1, line=b"GET  /a  HTTP/1.1"), [431]),
    ("spaces in the request line at the limit", head(M, line=b"GET  /a  HTTP/1.1"), [GOT]),
    ("short fields at the limit", short_fields(M), [GOT]),
    ("short fields past the limit", short_fields(M + 1), [431]),
    ("blanks at the limit", spaced(M), [GOT]),
    ("blanks past the limit", spaced(M + 1), [431]),
    ("empty lines first, at the limit", b"\r\n\r\n" + head(M), [GOT]),
    ("after requests, at the limit", _GETS + head(M) + _GETS[:28], [GOT_Y] * 5 + [GOT, GOT_Y]),
    ("after requests, past the limit", _GETS + head(M + 1), [GOT_Y] * 5 + [431]),
    ("after a body, at the limit", _UPLOAD + head(M), [_UPLOADED, GOT]),
    ("after a body, past the limit", _UPLOAD + head(M + 1), [_UPLOADED, 431]),
]


def _cuts_near_the_limit(data: bytes) -> list[int]:
    """Cuts around where each head's limit falls, and around its end."""
    starts = [0] + [i + 4 for i in range(len(data)) if data.startswith(b"\r\n\r\n", i)]
    near = {start + offset for start in starts for offset in range(M - 4, M + 5)}
    return sorted(cut for cut in near | {len(data) - 1, len(data) - 2} if 0 < cut < len(data))


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize(("name", "data", "expected"), CASES, ids=[c[0] for c in CASES])
def test_head_limit_wherever_the_reads_are_cut(
    parser_name: str, name: str, data: bytes, expected: list[object]
) -> None:
    assert outcome(parser_name, [data, b""])[: len(expected)] == expected
    for cut in _cuts_near_the_limit(data):
        reads = [data[:cut], data[cut:], b""]
        assert outcome(parser_name, reads)[: len(expected)] == expected, cut


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [CASES[1], CASES[3], CASES[11], CASES[23]],
    ids=[CASES[i][0] for i in (1, 3, 11, 23)],
)
def test_head_limit_trickled(
    parser_name: str, name: str, data: bytes, expected: list[object]
) -> None:
    """A byte per read from a thousand bytes before the limit on."""
    start = data.rfind(b"\r\n\r\n", 0, len(data) - 4) + 4 + M - 1000
    reads = [data[:start], *(data[i : i + 1] for i in range(start, len(data))), b""]
    assert outcome(parser_name, reads)[: len(expected)] == expected


def _near_the_limit(rng: random.Random) -> bytes:
    """A head near the limit, a byte or a line made wrong somewhere, after
    other requests or not."""
    size = rng.choice([M - 1, M, M + 1, M + 2, rng.randrange(M - 300, M + 300), 2 * M])
    line = rng.choice(
        [b"GET /a HTTP/1.1", b"GET /a HTTP/2.0", b"GET  /a HTTP/1.1", b"FOO /a HTTP/1.1"]
    )
    data = rng.choice([head, lambda n: short_fields(n), lambda n: spaced(n)])(size)
    if data.startswith(b"GET /a HTTP/1.1"):
        data = line + data[len(b"GET /a HTTP/1.1") :]
    for _ in range(rng.choice((0, 1, 2))):
        where = rng.choice([rng.randrange(len(data)), min(len(data) - 5, M + rng.randrange(-4, 4))])
        bad = rng.choice(
            [b"\x01", b"\r", b"\n", b"[", b" ", b"Host: y\r\n", b"Transfer-Encoding: gzip\r\n"]
        )
        if rng.random() < 0.5:
            data = data[:where] + bad + data[where + 1 :]
        else:
            line_start = data.rfind(b"\r\n", 0, where) + 2
            data = data[:line_start] + bad + data[line_start:]
    prefix = rng.choice([b"", b"\r\n", _GETS, _UPLOAD])
    return prefix + data + rng.choice([b"", _GETS[:28]])


SEEDS = range(4)
CASES_PER_SEED = 40


@pytest.mark.parametrize("seed", SEEDS)
def test_both_parsers_answer_heads_near_the_limit_alike(seed: int) -> None:
    """Each case whole and cut at random, near the limit or anywhere."""
    rng = random.Random(seed)
    for _ in range(CASES_PER_SEED):
        data = _near_the_limit(rng)
        answers = answers_when_cut(data, rng, _cuts_near_the_limit(data))
        assert len(answers) == 1, (data[:60], answers)


@pytest.mark.parametrize(
    ("data", "status"),
    [(head(M, line=b"GET /health/live HTTP/1.1"), 200), (head(M + 1), 431)],
    ids=["at the limit", "one byte past"],
)
async def test_head_limit_over_the_socket(server: RunningServer, data: bytes, status: int) -> None:
    reader, writer = await open_raw(server.port)
    writer.write(data[: M // 2])
    await writer.drain()
    writer.write(data[M // 2 :])
    got, _, body = await read_response(reader)
    assert got == status, body
    writer.close()
