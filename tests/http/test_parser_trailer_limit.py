"""The 16 KiB limit on a chunked body's trailer section, one rule for both
parsers wherever the reads are cut (as for a head: test_parser_head_limit).

A trailer section is its bytes as sent from the last chunk's line end to
its blank line's last byte ("\\r\\n" alone when there are no trailers). One
longer than MAX_HEAD_BYTES is answered for its first MAX_HEAD_BYTES bytes:
what is wrong in them (as if the client had stopped there), else 431. The
first problem in byte order wins: nothing after the limit is read.

Before, h11's side counted what it held while a section was incomplete and
did not bound one that came whole in a read, llhttp's side counted each
trailer's name and value and 4: whether the trailer's own error or the 431
came first, and whether a section just past the limit passed at all,
depended on the parser and on where the reads were cut."""

from __future__ import annotations

import random

import pytest

from syncd.http.parser import MAX_HEAD_BYTES
from tests.conftest import RunningServer, open_raw, read_response
from tests.http.test_parser_head_limit import PARSERS, answers_when_cut, outcome

M = MAX_HEAD_BYTES
HEAD = b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
GOT = ("POST", "/a", "", b"abc")
GOT_Y = ("GET", "/y", "", b"")
_NEXT = b"GET /y HTTP/1.1\r\nHost: x\r\n\r\n"


def section(size: int, field: bytes = b"X-T: ") -> bytes:
    """A trailer section of ``size`` bytes: ``field``, then one long value."""
    return field + b"v" * (size - len(field) - 4) + b"\r\n\r\n"


def short_fields(size: int) -> bytes:
    """A section of ``size`` bytes of short fields (each measured one byte
    more than it is, as trailers were measured)."""
    data = b"".join(b"A%d:b\r\n" % n for n in range(2000))
    data = data[: data.rfind(b"\r\n", 0, size - 40) + 2]
    return data + b"Z:" + b"z" * (size - len(data) - len(b"Z:\r\n\r\n")) + b"\r\n\r\n"


def spaced(size: int) -> bytes:
    """A section of ``size`` bytes, mostly blanks before a field's value
    (not measured, as llhttp skips them)."""
    return b"X:" + b" " * (size - len(b"X:v\r\n\r\n")) + b"v\r\n\r\n"


def chunked(trailers: bytes, chunks: bytes = b"3\r\nabc\r\n", last: bytes = b"0") -> bytes:
    return HEAD + chunks + last + b"\r\n" + trailers


def at(data: bytes, where: int, byte: bytes) -> bytes:
    return data[:where] + byte + data[where + 1 :]


def section_start(data: bytes) -> int:
    """Where the trailer section begins in a request built by ``chunked``."""
    return data.index(b"\r\n", data.rindex(b"\r\n0") + 2) + 2


# Chunk data that looks like a last chunk and trailers, and runs without a
# blank line for longer than the limit.
_TRICKY = b"\r\n0\r\nX: y\r\n" + b"a:b\r\n" * (M // 5) + b'0;e="q:r"\r\n'
_TRICKY_CHUNKS = b"%x\r\n%s\r\n" % (len(_TRICKY), _TRICKY)
_TRICKY_GOT = ("POST", "/a", "", _TRICKY)


def tab_coding(data: bytes) -> bytes:
    """A coding llhttp does not take ("chunked" and a tab): the body is read
    behind a stand-in head."""
    return data.replace(b"chunked", b"chunked\t", 1)


def upgrade_offer(data: bytes) -> bytes:
    """An upgrade offer with the body (read behind a stand-in head too)."""
    return data.replace(b"Host: x\r\n", b"Host: x\r\nConnection: upgrade\r\nUpgrade: h2c\r\n", 1)


CASES: list[tuple[str, bytes, list[object]]] = [
    ("no trailers", chunked(b"\r\n"), [GOT]),
    ("at the limit", chunked(section(M)), [GOT]),
    ("one byte past", chunked(section(M + 1)), [431]),
    ("far past", chunked(section(3 * M)), [431]),
    (
        "a control character the last byte within",
        chunked(at(section(M + 9), M - 1, b"\x01")),
        [400],
    ),
    ("a control character the first byte past", chunked(at(section(M + 9), M, b"\x01")), [431]),
    ("a bare LF the last byte within", chunked(at(section(M + 9), M - 1, b"\n")), [400]),
    ("a bare CR the last byte within", chunked(at(section(M + 9), M - 1, b"\r")), [431]),
    ("a bare CR well within", chunked(at(section(M + 9), M - 9, b"\r")), [400]),
    ("a framing field within", chunked(section(M + 9, b"Content-Length: 1\r\nX: ")), [400]),
    ("a framing field past", chunked(section(M + 9)[:-2] + b"Content-Length: 1\r\n\r\n"), [431]),
    ("a bad name within", chunked(section(M + 9, b"Bad[: x\r\nX: ")), [400]),
    ("a bad name past", chunked(section(M + 9)[:-2] + b"Bad[: x\r\n\r\n"), [431]),
    ("folding within", chunked(section(M + 9, b"X: a\r\n b\r\nX: ")), [400]),
    ("blanks at the limit", chunked(spaced(M)), [GOT]),
    ("blanks past the limit", chunked(spaced(M + 1)), [431]),
    ("blanks past the limit, chunked and a tab", tab_coding(chunked(spaced(2 * M))), [431]),
    ("short fields at the limit", chunked(short_fields(M)), [GOT]),
    ("short fields past the limit", chunked(short_fields(M + 1)), [431]),
    ("an extension on the last chunk", chunked(section(M + 1), last=b'0;e="a:b"'), [431]),
    ("an extension on the last chunk, at", chunked(section(M), last=b'0;e="a:b"'), [GOT]),
    ("long chunk data, no trailers", chunked(b"\r\n", _TRICKY_CHUNKS), [_TRICKY_GOT]),
    ("long chunk data, at the limit", chunked(section(M), _TRICKY_CHUNKS), [_TRICKY_GOT]),
    ("long chunk data, past the limit", chunked(section(M + 1), _TRICKY_CHUNKS), [431]),
    ("then a request, at the limit", chunked(section(M)) + _NEXT, [GOT, GOT_Y]),
    ("after a request, past the limit", _NEXT + chunked(section(M + 1)), [GOT_Y, 431]),
    ("chunked and a tab, at the limit", tab_coding(chunked(section(M))), [GOT]),
    ("chunked and a tab, past the limit", tab_coding(chunked(section(M + 1))), [431]),
    ("an upgrade offer, at the limit", upgrade_offer(chunked(section(M))), [GOT]),
    ("an upgrade offer, past the limit", upgrade_offer(chunked(section(M + 1))), [431]),
    ("an upgrade offer, short fields past", upgrade_offer(chunked(short_fields(M + 1))), [431]),
]


def _cuts(data: bytes) -> list[int]:
    """Cuts around the section's start, its limit and its end, and around
    the request's head and chunks."""
    start = section_start(data)
    near = {start + offset for base in (0, M) for offset in range(base - 4, base + 5)}
    near |= {len(HEAD) - 1, len(HEAD), len(HEAD) + 1, start - 3, start - 1, len(data) - 2}
    return sorted(cut for cut in near if 0 < cut < len(data))


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize(("name", "data", "expected"), CASES, ids=[c[0] for c in CASES])
def test_trailer_limit_wherever_the_reads_are_cut(
    parser_name: str, name: str, data: bytes, expected: list[object]
) -> None:
    assert outcome(parser_name, [data, b""])[: len(expected)] == expected
    for cut in _cuts(data):
        reads = [data[:cut], data[cut:], b""]
        assert outcome(parser_name, reads)[: len(expected)] == expected, cut


_TRICKLED = (
    "one byte past",
    "a control character the last byte within",
    "a bad name within",
    "long chunk data, past the limit",
    "blanks past the limit",
)


@pytest.mark.parametrize("parser_name", PARSERS)
@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [case for case in CASES if case[0] in _TRICKLED],
    ids=[case[0] for case in CASES if case[0] in _TRICKLED],
)
def test_trailer_limit_trickled(
    parser_name: str, name: str, data: bytes, expected: list[object]
) -> None:
    """A byte per read from a thousand bytes before the limit on."""
    start = section_start(data) + M - 1000
    reads = [data[:start], *(data[i : i + 1] for i in range(start, len(data))), b""]
    assert outcome(parser_name, reads)[: len(expected)] == expected


def _near_the_limit(rng: random.Random) -> bytes:
    """A chunked request whose trailer section is near the limit, a byte or
    a line made wrong somewhere in it, after and before other requests or
    not, its chunks short or long and like trailers."""
    size = rng.choice([M - 1, M, M + 1, M + 2, rng.randrange(M - 300, M + 300), 2 * M])
    trailers = rng.choice([section, short_fields])(size)
    for _ in range(rng.choice((0, 1, 2))):
        where = rng.choice(
            [rng.randrange(len(trailers)), min(len(trailers) - 5, M + rng.randrange(-4, 4))]
        )
        bad = rng.choice(
            [b"\x01", b"\r", b"\n", b"[", b" ", b"Host: y\r\n", b"Content-Length: 1\r\n", b"\r\n"]
        )
        if rng.random() < 0.5:
            trailers = trailers[:where] + bad + trailers[where + 1 :]
        else:
            line_start = trailers.rfind(b"\r\n", 0, where) + 2
            trailers = trailers[:line_start] + bad + trailers[line_start:]
    chunks = rng.choice([b"3\r\nabc\r\n", _TRICKY_CHUNKS, b"1\r\na\r\n" * 50])
    last = rng.choice([b"0", b"000", b'0;e="a:b"', b"0;x"])
    prefix = rng.choice([b"", b"\r\n", _NEXT, _NEXT * 3])
    framing = rng.choice([lambda data: data, lambda data: data, tab_coding, upgrade_offer])
    return prefix + framing(chunked(trailers, chunks, last)) + rng.choice([b"", _NEXT])


SEEDS = range(4)
CASES_PER_SEED = 50


@pytest.mark.parametrize("seed", SEEDS)
def test_both_parsers_answer_trailers_near_the_limit_alike(seed: int) -> None:
    """Each case whole and cut at random, near the section's limit or anywhere."""
    rng = random.Random(seed)
    for _ in range(CASES_PER_SEED):
        data = _near_the_limit(rng)
        answers = answers_when_cut(data, rng, _cuts(data))
        assert len(answers) == 1, (data[:60], answers)


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (chunked(section(M)).replace(b"POST /a", b"POST /health/live"), 405),
        (chunked(section(M + 1)), 431),
    ],
    ids=["at the limit", "one byte past"],
)
async def test_trailer_limit_over_the_socket(
    server: RunningServer, data: bytes, status: int
) -> None:
    reader, writer = await open_raw(server.port)
    writer.write(data[: len(data) // 2])
    await writer.drain()
    writer.write(data[len(data) // 2 :])
    got, _, body = await read_response(reader)
    assert got == status, body
    writer.close()
