"""The fast parser: httptools (llhttp, C). Optional, the ``fast`` extra.

llhttp parses everything it is given at once, so pipelined requests queue up
here as complete requests. It refuses the request-smuggling shapes itself
(Content-Length with Transfer-Encoding, duplicate Content-Length, bad chunk
sizes); the header-count and head-size limits, which llhttp leaves to its
embedder, are enforced here with the same numbers and answers as h11's side:
the count in the callbacks below, the size by feeding llhttp no more of a
head than MAX_HEAD_BYTES bytes (``_limit_cut``; llhttp reports no offsets).

llhttp refuses a method it does not know while parsing, at its first byte
that no known method has, where h11 takes any token: that request's head is
handed to the h11 parser, which judges it as it judges every head (501 for a
well-formed request with an unknown method, 400 for a malformed one), so the
two parsers answer alike.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Final

import httptools

from syncd.http.h11_parser import TRAILERS_TOO_LARGE, H11Parser, head_limit_refusal
from syncd.http.parser import (
    CLOSED,
    CONTINUE,
    LIST_BLANKS,
    MAX_HEAD_BYTES,
    MAX_HEADERS,
    NEED_DATA,
    Event,
    ParseError,
    add_body,
    body_bytes,
    body_too_large,
    field_limit_end,
    request_from_head,
    trailer_closes,
    transfer_coding_refusal,
    version_refusal,
)
from syncd.http.request import Request

QUEUED_REQUEST_COST: Final = 512
"""What a parsed request waiting behind one in flight costs beyond its head and
body bytes (the object, its headers dict). llhttp parses a whole read at once,
so the pipelining bound counts this too: a flood of tiny requests is bounded
like a few large ones."""


_COMMON_NAMES: Final = (
    "accept",
    "accept-encoding",
    "accept-language",
    "authorization",
    "cache-control",
    "connection",
    "content-length",
    "content-type",
    "cookie",
    "host",
    "origin",
    "referer",
    "sec-websocket-key",
    "sec-websocket-protocol",
    "sec-websocket-version",
    "upgrade",
    "user-agent",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-real-ip",
    "x-request-id",
)
_NAME_KEYS: Final = {
    spelt.encode("latin-1"): name
    for name in _COMMON_NAMES
    for spelt in (name, "-".join(part.capitalize() for part in name.split("-")), name.upper())
}
"""Header names as clients commonly spell them, already decoded and folded:
one look-up instead of a decode and a lower() per header."""


_METHOD_ERRORS: Final = frozenset(
    {
        # An RTSP method (DESCRIBE, SETUP...) in an HTTP/1.x request.
        "Invalid method for HTTP/x.x request",
        # PRI without the rest of the HTTP/2 preface (which feed answers 505).
        "Expected HTTP/2 Connection Preface",
    }
)
"""llhttp's words for a method it refuses once the request line is read (the
method token itself raises ``HttpParserInvalidMethodError``)."""


def _expects_continue(expect: str) -> bool:
    """Whether an Expect field (its lines joined) asks for 100-continue: a
    member of its list, in any case, as h11 reads it (``100-continue, foo``,
    or the field given twice, asks too)."""
    return "100-continue" in (member.strip(LIST_BLANKS) for member in expect.lower().split(","))


_VERSION_ERRORS: Final = frozenset(
    {"Expected dot", "Invalid major version", "Invalid minor version", "Expected HTTP/"}
)
"""llhttp's words for a version it could not read whole."""
_CODING_ERROR: Final = "Request has invalid `Transfer-Encoding`"
"""llhttp's words for a Transfer-Encoding whose last coding it does not read as chunked."""


_CHUNKED_STAND_IN: Final = b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"


def _stand_in(headers: dict[str, str]) -> bytes:
    """A head with the framing of ``headers`` (a request's), to read its body
    (and what follows) with a fresh llhttp."""
    if "transfer-encoding" in headers:
        return _CHUNKED_STAND_IN
    length = headers.get("content-length", "0").encode("ascii")
    return b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: " + length + b"\r\n\r\n"


def _coding_head_end(data: bytes) -> int | None:
    """Where, in ``data`` (from a request boundary on), the head of the first
    request whose Transfer-Encoding llhttp refuses ends: a fresh llhttp is fed
    ``data`` in pieces that end at blank lines, and refuses it in the piece
    that ends with that head (llhttp judges the coding once the head is read).
    One pass, however many requests come before."""
    parser = httptools.HttpRequestParser(_Completions())
    start = 0
    while True:
        found = data.find(b"\r\n\r\n", start)
        if found < 0:
            return None
        end = found + 4
        try:
            parser.feed_data(data[start:end])
        except httptools.HttpParserUpgrade:
            return None
        except httptools.HttpParserError as exc:
            return end if str(exc) == _CODING_ERROR else None
        start = end


def _length_value(digits: str) -> int:
    """A Content-Length's digits as a number: leading zeros and all (RFC 9110
    8.6, 1*DIGIT; llhttp takes them), which int() alone refuses past 4,300
    digits (Python's bound on decimal strings) with a ValueError."""
    return int(digits.lstrip("0") or "0")


class _Completions:
    """A parser's protocol that only counts completed requests (``_message_start``)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def on_message_complete(self) -> None:
        self.count += 1


def _completed(data: bytes) -> int:
    """How many requests a fresh llhttp completes in ``data``."""
    counter = _Completions()
    try:
        httptools.HttpRequestParser(counter).feed_data(data)
    except (httptools.HttpParserError, httptools.HttpParserUpgrade):
        pass
    return counter.count


class _Refusals(_Completions):
    """A parser's protocol that counts completed requests and remembers
    whether llhttp went on to refuse a method."""

    __slots__ = ("refused_method",)

    def __init__(self) -> None:
        super().__init__()
        self.refused_method = False


def _after_chunked_body(
    tail: bytes, data: bytes, completed: int, refusal: str = "method"
) -> bytes | None:
    """``data`` after the end of a chunked body that began in an earlier read
    (which ended with ``tail``): the first place after which a fresh llhttp
    completes ``completed`` requests and then refuses a method (``refusal``
    "coding": a Transfer-Encoding; "none": refuses nothing), of the first few
    that end a last chunk and its trailers, then of those that end a line
    pair; None if none does."""
    both = tail + data
    cut = len(tail)
    ends = [found.end() - cut for found in _LAST_CHUNK.finditer(both) if found.end() > cut]
    ends += [found.end() - cut for found in _BLANK_LINES.finditer(both) if found.end() > cut]
    tried: set[int] = set()
    for end in ends:
        if end in tried:
            continue
        if len(tried) == _AFTER_CHUNKED_TRIES:
            break
        tried.add(end)
        counter = _Refusals()
        try:
            httptools.HttpRequestParser(counter).feed_data(data[end:])
        except httptools.HttpParserError as exc:
            if refusal == "none":
                continue
            if refusal == "coding":
                refused = str(exc) == _CODING_ERROR
            else:
                refused = isinstance(exc, httptools.HttpParserInvalidMethodError) or (
                    str(exc) in _METHOD_ERRORS
                )
            if refused and counter.count == completed:
                return data[end:]
        except httptools.HttpParserUpgrade:
            pass
        else:
            if refusal == "none" and counter.count == completed:
                return data[end:]
    return None


_MEASURED_HEAD_BOUND: Final = MAX_HEAD_BYTES + MAX_HEADERS + 1
"""What the target and fields handed over (4 bytes a field besides its name
and value) may measure in a head of at most MAX_HEAD_BYTES bytes (a field
line ``a:b`` is 5 bytes, measured 6). ``_limit_cut`` keeps llhttp from
reading past the limit; this bounds a head whose start it does not know
(behind a stand-in head)."""


def _run_without_blank_line(data: bytes, start: int, from_start: bool = False) -> int | None:
    """Where in ``data``, from ``start`` (a request boundary, or a blank
    line's end) on, the first run of more than MAX_HEAD_BYTES bytes begins
    that no blank line ends in (at ``start`` or at a blank line's end);
    None if there is none. Jumps to the last blank line within reach, so a
    read costs about a search per MAX_HEAD_BYTES."""
    at = start
    while len(data) - at > MAX_HEAD_BYTES:
        found = data.rfind(b"\r\n\r\n", max(0, at - 3), at + MAX_HEAD_BYTES)
        if found < 0 or found + 4 <= at:
            return at if at > 0 or from_start else None
        at = found + 4
    return None


_MEASURED_TRAILER_BOUND: Final = 2 * MAX_HEAD_BYTES
"""What the trailer fields handed over (4 bytes a field besides its name and
value) may measure in a section of at most MAX_HEAD_BYTES bytes (a field
line ``a:`` is 4 bytes, measured 5): ``_trailer_cut`` keeps llhttp from
reading past the limit, behind a stand-in head too (``_read_held_body``);
this is a bound should it not."""
_BLANK_LINES: Final = re.compile(b"\r\n\r\n")
_FIELD_START: Final = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+:")
"""A field line's name and colon (a chunk line has no colon but in a quoted
extension, after a ";")."""
_LAST_CHUNK: Final = re.compile(rb"(?:^|\n)0+(?:;[^\r\n]*)?\r\n(?:[^\r\n]+\r\n)*\r\n")
"""A last chunk's line, its trailer fields and the blank line after them."""
_AFTER_CHUNKED_TRIES: Final = 16


def _message_start(data: bytes, completed: int) -> int:
    """Where in ``data`` (fed from a request boundary) the request after the
    first ``completed`` ones starts: the shortest prefix a fresh llhttp
    completes them in, found by bisection (llhttp reports no offsets). Only
    on the way to a refusal, so its few extra parses cost nothing in use."""
    low, high = 0, len(data)
    while low < high:
        middle = (low + high) // 2
        if _completed(data[:middle]) >= completed:
            high = middle
        else:
            low = middle + 1
    return low


class _Refused(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.message = message
        self.headers = headers  # ParseError.headers


class HttptoolsParser:
    name = "httptools"

    # Slots, not an instance dict: llhttp's callbacks read and write these on
    # every request, and past 30 attributes CPython 3.11 gives up the
    # shared-key dict whose lookups its attribute caches make cheap (31 cost
    # the op path 2.7% of its instructions under callgrind).
    __slots__ = (
        "_body",
        "_body_framing",
        "_body_only",
        "_body_tail",
        "_chunk_at",
        "_closed",
        "_current",
        "_eof_after_upgrade",
        "_events",
        "_expecting",
        "_failed",
        "_head_bound",
        "_head_bytes",
        "_head_exact",
        "_header_count",
        "_headers",
        "_held",
        "_in_message",
        "_judge",
        "_length",
        "_max_body",
        "_parser",
        "_partial",
        "_partial_bytes",
        "_partial_skip",
        "_queued_bytes",
        "_queued_sizes",
        "_section",
        "_size",
        "_tail",
        "_trailer_bytes",
        "_trailing",
        "_upgraded",
        "_url",
    )

    def __init__(self, max_body: int) -> None:
        self._max_body = max_body
        self._parser = httptools.HttpRequestParser(self)
        self._events: deque[Event] = deque()
        self._expecting: Request | None = None
        """The request of the last CONTINUE handed out (``continue_head``)."""
        self._queued_sizes: deque[int] = deque()
        """Sizes (see ``buffered``) of the requests in ``_events``, in order."""
        self._queued_bytes = 0
        self._url = b""
        self._headers: dict[str, str] = {}
        self._header_count = 0
        self._head_bytes = 0
        self._body: bytes | bytearray = b""
        self._size = 0
        self._in_message = False
        self._failed: ParseError | None = None
        self._trailing = b""
        self._upgraded = False
        self._eof_after_upgrade = False
        self._closed = False
        self._body_framing = b""
        """The framing header of an upgrade offer's body still to read (see
        ``_read_held_body``); empty for every other request."""
        self._held: Request | None = None
        """That request, complete but for its body."""
        self._body_only = False
        """The parser is reading ``_held``'s body behind a stand-in head."""
        self._judge: H11Parser | None = None
        """The h11 parser judging a head whose method llhttp refused."""
        self._partial: list[bytes] | None = None
        """The reads of a request still in its head (so possibly with a method
        llhttp will refuse), the first from a request boundary on; None when
        there is none, or where it starts is unknown."""
        self._partial_skip = 0
        """Requests in ``_partial[0]`` before that one."""
        self._partial_bytes = 0
        self._length = -1
        """The current request's Content-Length once its head is read (-1: none)."""
        self._trailer_bytes = -1
        """Bytes of the current request's trailer fields; -1 while its head is
        still being read (llhttp reports both through ``on_header``)."""
        self._body_tail = b""
        """The last bytes (up to 16) of a read that ended inside a body: where
        a chunked body ends when its end is cut in two (see _refused_head)."""
        self._head_bound = 0
        """After a read that ended inside a request's head: at most how many
        bytes of it came (from its request line on), exactly if
        ``_head_exact`` (see ``_limit_cut``)."""
        self._head_exact = False
        self._chunk_at = -1
        """The body bytes read when llhttp last read a chunk line whole
        (``on_chunk_header``), -1 once that chunk is complete: equal to
        ``_size`` while nothing has been read after that line (no data yet,
        or the trailer section)."""
        self._section = -1
        """Bytes of the trailer section read so far, from the last chunk's
        line end (see ``_trailers_so_far``); -1 outside one."""
        self._tail = b""
        """The last bytes (up to 8) of a read that ended inside a request's
        head, empty after one that ended elsewhere in a request: where the
        head's blank line ends when it is cut in two (see ``_head_end``)."""

    # -- the interface -------------------------------------------------

    def feed(self, data: bytes) -> None:
        if self._judge is not None:
            self._judge.feed(data)
            return
        if self._failed is not None or self._upgraded:
            if self._upgraded:
                self._trailing += data
                self._eof_after_upgrade = self._eof_after_upgrade or not data
            return
        if not data:
            if self._in_message:
                refusal = None
                if self._trailer_bytes < 0 and self._url:
                    # In a head of a version llhttp reads on past (HTTP/2.0):
                    # h11's side answers the version.
                    refusal = self._head_version_refusal(self._parser)
                if refusal is not None and refusal.status == 505:
                    self._failed = refusal
                elif (
                    self._trailer_bytes < 0
                    and self._header_count == MAX_HEADERS
                    and self._tail.endswith((b"\r\n", b"\r\n\r"))
                ):
                    # The field line past MAX_HEADERS is whole (its name
                    # handed the 100th field over; nothing after it has
                    # begun but the blank line): 431, as h11's side answers
                    # once it is whole (see ``field_limit_end``).
                    self._failed = refusal or ParseError(431, "too many header fields")
                else:
                    self._fail(400, "connection closed in the middle of a request")
            else:
                self._closed = True
            return
        if not self._in_message and len(data) <= MAX_HEAD_BYTES:
            # Nearly every read: no head in it can pass the limit (what
            # ``_limit_cut`` answers first, without its calls: the op path).
            self._parse(data)
            return
        while True:
            cut = self._limit_cut(data)
            if cut is None or cut >= len(data):
                self._parse(data)
                return
            if cut:
                self._parse(data[:cut])
                data = data[cut:]
                if self._failed is not None or self._judge is not None or self._upgraded:
                    self.feed(data)  # (to the judge, or held after an upgrade)
                    return
            if self._head_bound == MAX_HEAD_BYTES and self._head_exact and self._in_head():
                # The head goes on past the limit: answered for its bytes so
                # far, as h11's side answers it (see head_limit_refusal).
                head = self._head_so_far()
                if head is None:
                    self._failed = self._limit_refusal()
                else:
                    self._failed = head_limit_refusal(head[:MAX_HEAD_BYTES])
                self._partial = None
                return
            if self._section == MAX_HEAD_BYTES and self._in_message and self._failed is None:
                # The trailer section goes on past the limit: answered for
                # its first MAX_HEAD_BYTES bytes, which llhttp took (see
                # h11_parser.trailer_limit_refusal).
                self._failed = ParseError(431, TRAILERS_TOO_LARGE)
                return
            if not cut:  # not expected: _limit_cut moves on or stops at the limit
                self._parse(data)
                return

    def _parse(self, data: bytes) -> None:
        """Feed llhttp ``data``, a read or part of one (see ``_limit_cut``)."""
        parser = self._parser
        # A request boundary before these bytes, or where the body in progress
        # ends in them (negative: unknown), and how many requests were
        # complete: what locates a request whose method llhttp refuses.
        at_boundary = not self._in_message and self._held is None
        left = self._length - self._size
        queued = len(self._queued_sizes)
        held_body: bytes | None = None
        # The bytes from a held request's body on, read after the handlers
        # below (an exception raised inside one would lose its context).
        try:
            try:
                parser.feed_data(data)
            except httptools.HttpParserUpgrade as exc:
                offset = exc.args[0] if exc.args else len(data)
                if self._held is None:
                    self._upgraded = True
                    self._trailing = data[offset:]
                    return
                held_body = data[offset:]
        except _Refused as exc:
            self._fail(exc.status, exc.message, exc.headers)
        except httptools.HttpParserCallbackError as exc:
            self._fail_callback(exc)
        except httptools.HttpParserError as exc:
            if data.startswith(b"PRI * HTTP/2.0\r\n"):
                self._fail(505, "HTTP/2.0 is not supported")  # the HTTP/2 preface, as h11 answers
            elif str(exc) == _CODING_ERROR and self._current.headers is self._headers:
                # The coding passed on_headers_complete, so it is chunked with
                # blanks llhttp does not strip ("chunked\t": RFC 9110 5.5 has
                # leading and trailing SP and HTAB outside the value); h11
                # takes it. The body is read behind a stand-in head.
                rest = self._body_after_head(
                    data,
                    at_boundary,
                    left,
                    len(self._queued_sizes) - queued,
                    parser is self._parser,
                )
                if rest is None:
                    self._fail(400, f"malformed request: {exc}")
                else:
                    self._held = self._current
                    self._body_framing = b"transfer-encoding: chunked"
                    held_body = rest
            elif isinstance(exc, httptools.HttpParserInvalidMethodError) or (
                str(exc) in _METHOD_ERRORS
            ):
                completed = len(self._queued_sizes) - queued
                head = self._refused_head(
                    data, at_boundary, left, completed, parser is self._parser
                )
                if head is None and parser.get_method() == b"PRI" and self._url:
                    head = self._pri_head(data)
                if head is not None:
                    self._judge = H11Parser(self._max_body)
                    self._judge.feed(head)
                else:
                    # A read that completed a request begun in an earlier one
                    # (its head, or a chunked body), then began the refused
                    # one: where is unknowable.
                    self._fail(400, f"malformed request: {exc}")
            else:
                self._failed = self._llhttp_refusal(exc, parser)
                if self._header_count == MAX_HEADERS and self._trailer_bytes < 0:
                    completed = len(self._queued_sizes) - queued
                    same = parser is self._parser
                    head = self._refused_head(data, at_boundary, left, completed, same)
                    self._failed = self._field_limit_refusal(head) or self._failed
        else:
            if self._in_message:
                # A read that ended inside a request (never one that ended
                # between requests, as a request read whole does).
                if self._trailer_bytes < 0:  # in a head
                    completed = len(self._queued_sizes) - queued
                    self._keep_partial(data, at_boundary, left, completed, parser is self._parser)
                elif self._partial is not None:
                    self._partial = None
            elif self._partial is not None:
                self._partial = None
        if held_body is not None:
            self._read_held_body_of_refused(held_body)
        if self._in_message and self._failed is None and self._judge is None:
            # A read that ended inside a request (never one that ended
            # between requests, as a request read whole does): its last bytes.
            whole = not at_boundary and len(self._queued_sizes) == queued
            if self._trailer_bytes < 0:
                if whole:
                    self._head_bound += len(data)
                else:
                    # The head began after the last blank line (it holds
                    # none); exactly where is known only after a boundary.
                    skipped = len(data) - len(data.lstrip(b"\r\n")) if at_boundary else 0
                    blank = data.rfind(b"\r\n\r\n")
                    start = max(blank + 4 if blank >= 0 else 0, skipped)
                    self._head_bound = len(data) - start
                    self._head_exact = at_boundary and len(self._queued_sizes) == queued
                tail = self._tail = ((self._tail if whole else b"") + data)[-8:]
                self._body_tail = b""
                if tail[-4:] == b"\r\n\r\n" and self._url and self._parser.get_method() == b"PRI":
                    # llhttp waits for the rest of an HTTP/2 preface after
                    # "PRI <target> HTTP/1.x" and a blank line; h11's side
                    # answers the method (501) at once.
                    version = self._parser.get_http_version().encode("ascii")
                    self._judge = H11Parser(self._max_body)
                    self._judge.feed(b"PRI " + self._url + b" HTTP/" + version + b"\r\n\r\n")
                    self._in_message = False
            else:
                self._tail = b""
                self._body_tail = ((self._body_tail if whole else b"") + data)[-16:]
                if held_body is not None:
                    pass  # (its trailer section was followed as it was read)
                elif self._chunk_at == self._size:  # a chunk line, then nothing or trailers
                    self._section = self._trailers_so_far(data)
                else:
                    self._section = -1
        if self._partial is not None and (self._failed is not None or self._judge is not None):
            self._partial = None

    def _in_head(self) -> bool:
        return self._in_message and self._trailer_bytes < 0

    def _limit_cut(self, data: bytes) -> int | None:
        """Where to cut ``data`` (a read) so that llhttp, fed the part before,
        stops at a head's byte MAX_HEAD_BYTES (the rest would pass the limit:
        ``feed`` answers it, see ``head_limit_refusal``), or where a blank
        line after which such a head may start ends, to look again from
        there; None when no head in ``data`` can pass the limit. A head holds
        no blank line but its last, so one that passes the limit lies in more
        than MAX_HEAD_BYTES bytes without one: reads without such a run (nearly
        all) cost a length compare or a few searches."""
        if self._held is not None or self._body_only or self._upgraded:
            if self._body_only and self._length < 0 and not self._upgraded:
                return self._trailer_cut(data)  # a held chunked body: its trailers
            return None  # read behind a stand-in head: left to the measure in on_header
        if self._in_head():
            if self._head_bound + len(data) <= MAX_HEAD_BYTES:
                return None
            end = self._head_end(data)
            length = len(data) if end is None else end
            if self._head_bound + length > MAX_HEAD_BYTES and not self._head_exact:
                head = self._head_so_far()
                if head is None:
                    return None  # where it began is unknown: the measure in on_header
                self._head_bound = len(head)
                self._head_exact = True
            if self._head_bound + length > MAX_HEAD_BYTES:
                return MAX_HEAD_BYTES - self._head_bound
            if end is None:
                return None
            start = end
        elif not self._in_message:
            if len(data) <= MAX_HEAD_BYTES:
                return None
            skipped = len(data) - len(data.lstrip(b"\r\n"))
            found = data.find(b"\r\n\r\n", skipped, skipped + MAX_HEAD_BYTES)
            if found < 0:
                return skipped + MAX_HEAD_BYTES  # (or the read ends first: fed whole)
            start = found + 4
        elif self._length >= 0:  # a body of known length: a boundary after it
            left = self._length - self._size
            return left if left > 0 and len(data) - left > MAX_HEAD_BYTES else None
        else:  # a chunked body or its trailers: they end with a blank line
            cut = self._trailer_cut(data)
            tail = self._body_tail
            found = (tail + data).find(b"\r\n\r\n", max(0, len(tail) - 3))
            if found < 0:
                return cut
            head_cut = _run_without_blank_line(data, found + 4 - len(tail))
            return cut if head_cut is None or (cut is not None and cut < head_cut) else head_cut
        return _run_without_blank_line(data, start)

    def _trailer_cut(self, data: bytes) -> int | None:
        """For a read in a chunked body: where to cut it so that llhttp, fed
        the part before, stops at a trailer section's byte MAX_HEAD_BYTES
        (``feed`` answers the rest, as for a head), or at a point to look
        again from; None when no trailer section in ``data`` can pass the
        limit. A section holds no blank line but its last, so one that
        begins in ``data`` passes the limit only in a run of more than
        MAX_HEAD_BYTES bytes without one; where it begins is known only once
        llhttp has read its last chunk's line (``_trailers_so_far``)."""
        section = self._section
        if section < 0:  # not in one: it begins in data, if at all
            if len(data) <= MAX_HEAD_BYTES:
                return None
            run = _run_without_blank_line(data, 0, from_start=True)
            return None if run is None else run + MAX_HEAD_BYTES
        left = MAX_HEAD_BYTES - section
        if len(data) <= left:
            return None
        # Its last bytes so far (after the last chunk's CRLF): where its
        # blank line ends when it is cut in two.
        before = (b"\r\n" + self._body_tail[len(self._body_tail) - section :])[-3:]
        found = (before + data).find(b"\r\n\r\n")
        if found >= 0 and found + 4 - len(before) <= left:
            return None  # it ends within the limit
        return left

    def _trailers_so_far(self, data: bytes) -> int:
        """After ``data`` (a read or part of one) was fed in a chunked body,
        with nothing read after the last chunk line llhttp read whole: bytes
        of the trailer section so far (0 also right after a line of a chunk
        with data). Unless the section began earlier, the line's end is in
        ``data`` (``on_chunk_header`` reset ``_section``), and every whole
        line after it is a trailer field llhttp took, which no chunk line
        looks like: the last whole line that is no field (or the first
        line of ``data``) is that chunk line."""
        if self._section >= 0:
            return self._section + len(data)
        line_end = data.rfind(b"\n") + 1
        while line_end > 0:
            start = data.rfind(b"\n", 0, line_end - 1) + 1
            if start == 0 or _FIELD_START.match(data, start) is None:
                return len(data) - line_end
            line_end = start
        return len(data)  # not expected: the chunk line's end is in data

    def _head_so_far(self) -> bytes | None:
        """The bytes of the head still coming, from its request line on
        (without what came before it in its first read), if they are known
        (see ``_keep_partial``)."""
        if self._partial is None:
            return None
        first = self._partial[0]
        if self._partial_skip:
            first = first[_message_start(first, self._partial_skip) :]
            self._partial[0] = first
            self._partial_skip = 0
        first = first.lstrip(b"\r\n")
        self._partial[0] = first
        self._partial_bytes = sum(len(part) for part in self._partial)
        return b"".join(self._partial)

    def _limit_refusal(self) -> ParseError:
        refusal = self._version_first(431, "request head too large")
        return ParseError(refusal.status, refusal.message)

    @staticmethod
    def _from_boundary(
        data: bytes, at_boundary: bool, left: int, completed: int
    ) -> tuple[bytes, int] | None:
        """``data`` from its first request boundary on, and how many requests
        complete there before the last one begins; None if that is unknown."""
        if at_boundary:
            return data, completed
        if completed and left >= 0:  # the rest of a body of known length came first
            return data[left:], completed - 1
        return None

    def _keep_partial(
        self, data: bytes, at_boundary: bool, left: int, completed: int, same: bool
    ) -> None:
        """A read ended inside a head: keep what ``_refused_head`` needs
        should its method be refused in a later read (rare: llhttp refuses
        an unknown method at its first byte no method has, an RTSP one at the
        version, PRI after the line)."""
        start = self._from_boundary(data, at_boundary, left, completed) if same else None
        if start is None and same and completed and self._tail:
            start = self._after_cut_head(data, completed)
        elif start is None and same and completed:  # after a chunked body begun earlier
            after = _after_chunked_body(self._body_tail, data, completed - 1, "none")
            if after is not None:
                start = after, completed - 1
        if start is not None:
            self._partial = [start[0]]
            self._partial_skip = start[1]
            self._partial_bytes = len(start[0])
        elif same and completed == 0 and self._partial is not None:
            self._partial.append(data)
            self._partial_bytes += len(data)
            if self._partial_bytes > 2 * MAX_HEAD_BYTES:
                self._partial = None  # spaces without end; 431 from h11 anyway
        else:
            self._partial = None

    def _refused_head(
        self, data: bytes, at_boundary: bool, left: int, completed: int, same: bool
    ) -> bytes | None:
        """The bytes from the start of the request whose method llhttp refused
        in ``data`` (after ``completed`` requests there), or None if unknown."""
        if not same:
            return None  # read behind a stand-in head (see _read_held_body)
        start = self._from_boundary(data, at_boundary, left, completed)
        if start is not None:
            first, skip = start
            rest = b""
        elif completed == 0 and self._partial is not None:
            first, skip = self._partial[0], self._partial_skip
            rest = b"".join(self._partial[1:]) + data
        elif completed and self._tail:
            start = self._after_cut_head(data, completed)
            if start is None:
                return None
            first, skip = start
            rest = b""
        elif completed:
            # The read went on with a chunked body begun earlier, whose end
            # llhttp does not tell: it ends in a blank line, after which a
            # fresh llhttp must find the other requests and then refuse the
            # same way. The first few such places are tried.
            after = _after_chunked_body(self._body_tail, data, completed - 1)
            if after is None:
                return None
            first, skip, rest = after, completed - 1, b""
        else:
            return None
        return first[_message_start(first, skip) if skip else 0 :] + rest

    def _after_cut_head(self, data: bytes, completed: int) -> tuple[bytes, int] | None:
        """For a read that completed ``completed`` requests, the first of
        which had its head begun in an earlier read: after that head's blank
        line, a stand-in head with the same framing makes the rest a run of
        whole requests again. That run, and the requests it completes."""
        end = self._head_end(data)
        if end is None:
            return None
        first_done = [e for e in self._events if isinstance(e, Request)][-completed]
        return _stand_in(first_done.headers) + data[end:], completed

    def _field_limit_refusal(self, head: bytes | None) -> ParseError | None:
        """For llhttp's refusal of a head with MAX_HEADERS fields handed
        over (the next one is begun): 431 if the field line past them is
        whole before the refused byte (llhttp hands a field over only when
        the next name ends, or the head, so its refusal of a later line can
        come first), as h11's side answers (see ``field_limit_end``). ``head``:
        the head's bytes from its start, None if unknown. A fresh llhttp with
        no callbacks judges the head up to that line's end: if it takes it,
        the refused byte came after."""
        if head is None:
            return None
        head = head.lstrip(b"\r\n")  # empty lines before the request line
        end = field_limit_end(head)
        if end < 0:
            return None
        try:
            httptools.HttpRequestParser(_Completions()).feed_data(head[:end])
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            return None
        refusal = self._version_first(431, "too many header fields")
        return ParseError(refusal.status, refusal.message)

    def _llhttp_refusal(
        self, exc: httptools.HttpParserError, parser: httptools.HttpRequestParser
    ) -> ParseError:
        """The answer to llhttp's refusal ``exc`` (not of a method)."""
        message = str(exc)
        if message == "Invalid HTTP version":
            # A well-formed version llhttp does not take (HTTP/3.0): 505
            # for a later major version, as h11's side answers, not 400.
            refusal = self._head_version_refusal(parser)
            if refusal is None:  # not expected: llhttp takes 1.0 and 1.1
                return ParseError(400, f"malformed request: {exc}")
            return refusal
        if (
            self._in_message
            and self._trailer_bytes < 0
            and self._url
            and message not in _VERSION_ERRORS
        ):
            # Past the version, in the head of one llhttp reads but we do not
            # take (HTTP/2.0): h11's side answers the version first.
            refusal = self._head_version_refusal(parser)
            if refusal is not None and refusal.status == 505:
                return refusal
        return ParseError(400, f"malformed request: {exc}")

    def _pri_head(self, data: bytes) -> bytes | None:
        """The head of a PRI request whose request line ended in an earlier
        read (llhttp refuses the method once it has read the line and the
        bytes after it are no HTTP/2 preface): the line as llhttp read it,
        then ``data`` after it."""
        both = self._tail + data
        version = self._parser.get_http_version().encode("ascii")
        line_end = both.find(b"\r\n", max(0, len(self._tail) - 1))
        limit = line_end + 2 if line_end >= 0 else len(both)
        end = both.rfind(b"/" + version + b"\r\n", 0, limit)
        if end < 0:
            return None  # a version llhttp read otherwise (HTTP/1.00): h11 refuses the line
        return b"PRI " + self._url + b" HTTP/" + version + both[end + 1 + len(version) :]

    def _head_end(self, data: bytes) -> int | None:
        """Where, in ``data``, the head that was still being read when the read
        began ends (after its blank line); None if not in ``data``."""
        tail = self._tail
        # (not a blank line wholly in the tail: one of an earlier request)
        found = (tail + data).find(b"\r\n\r\n", max(0, len(tail) - 3))
        end = found + 4 - len(tail)
        return end if found >= 0 and end > 0 else None

    def _body_after_head(
        self, data: bytes, at_boundary: bool, left: int, completed: int, same: bool
    ) -> bytes | None:
        """The bytes of ``data`` after the head of the request llhttp was
        reading when it stopped at that head's end; None if unknown."""
        if completed == 0 and not at_boundary and self._partial is None:
            end = self._head_end(data)  # the head began in an earlier read
            return None if end is None else data[end:]
        start = self._from_boundary(data, at_boundary, left, completed) if same else None
        if start is not None:
            whole = start[0]
        elif same and completed == 0 and self._partial is not None:
            whole = b"".join(self._partial) + data
        elif same and completed and self._tail:
            end = self._head_end(data)  # of the request the read completed first
            if end is None:
                return None
            first_done = [e for e in self._events if isinstance(e, Request)][-completed]
            whole = _stand_in(first_done.headers) + data[end:]
        elif same and completed:  # after a chunked body begun earlier
            after = _after_chunked_body(self._body_tail, data, completed - 1, "coding")
            if after is None:
                return None
            whole = after
        else:
            return None
        end = _coding_head_end(whole)
        return None if end is None else whole[end:]

    def _read_held_body_of_refused(self, rest: bytes) -> None:
        """``_read_held_body``, its own refusals answered as ``feed`` answers
        them (an unknown method after the held body too: 501, not 400); a
        later request of the same read with a chunked coding llhttp does not
        take is read the same way."""
        more: bytes | None = rest
        while more is not None:
            rest = more
            queued = len(self._queued_sizes)
            stand_in = b"POST / HTTP/1.1\r\nhost: x\r\n" + self._body_framing + b"\r\n\r\n"
            try:
                more = self._read_held_body(rest)
            except _Refused as exc:
                self._fail(exc.status, exc.message, exc.headers)
                return
            except httptools.HttpParserCallbackError as exc:
                self._fail_callback(exc)
                return
            except httptools.HttpParserError as exc:
                fed = stand_in + rest
                if isinstance(exc, httptools.HttpParserInvalidMethodError) or (
                    str(exc) in _METHOD_ERRORS
                ):
                    # The stand-in head, the held body and the requests after
                    # it are whole requests: the refused one starts after them.
                    head = fed[_message_start(fed, len(self._queued_sizes) - queued) :]
                    self._judge = H11Parser(self._max_body)
                    self._judge.feed(head)
                    return
                end = None
                if str(exc) == _CODING_ERROR and self._current.headers is self._headers:
                    end = _coding_head_end(fed)
                if end is None:
                    self._failed = self._llhttp_refusal(exc, self._parser)
                    if self._header_count == MAX_HEADERS and self._trailer_bytes < 0:
                        head = fed[_message_start(fed, len(self._queued_sizes) - queued) :]
                        self._failed = self._field_limit_refusal(head) or self._failed
                    return
                self._held = self._current
                self._body_framing = b"transfer-encoding: chunked"
                more = fed[end:]
        if not self._upgraded and self._in_message and self._trailer_bytes < 0:
            # The read ended inside the head of a request after the held body:
            # kept from the stand-in head on (a request boundary), as
            # ``_keep_partial`` keeps a head, should llhttp refuse its method
            # in a later read.
            fed = stand_in + rest
            self._partial = [fed]
            self._partial_skip = len(self._queued_sizes) - queued
            self._partial_bytes = len(fed)

    def _read_held_body(self, rest: bytes) -> bytes | None:
        """Read the body of an upgrade offer with one. llhttp skips the body of
        every request with ``Connection: upgrade`` (httptools tells it to) and
        stops there. An offer we do not take (h2c, or any on a route that is
        not an upgrade) is an ordinary request, body included (RFC 9110 7.8),
        as h11 reads it: a fresh llhttp reads the body behind a stand-in head
        with the same framing, then goes on with what follows. Returns the
        bytes from the body of a later such request in ``rest`` on, to read
        the same way; None when done."""
        self._parser = httptools.HttpRequestParser(self)
        self._body_only = True
        head = b"POST / HTTP/1.1\r\nhost: x\r\n" + self._body_framing + b"\r\n\r\n"
        fed = 0  # of rest
        try:
            self._parser.feed_data(head)
            self._body_tail = b""
            while self._in_message and self._length < 0 and fed < len(rest):
                # A chunked body: its trailer section is held to the limit
                # as in ``feed`` (see ``_trailer_cut``).
                cut = self._trailer_cut(rest[fed:])
                piece = rest[fed:] if cut is None else rest[fed : fed + cut]
                self._parser.feed_data(piece)
                fed += len(piece)
                if not self._in_message:
                    break
                self._body_tail = (self._body_tail + piece)[-16:]
                self._section = self._trailers_so_far(piece) if self._chunk_at == self._size else -1
                if self._section == MAX_HEAD_BYTES and fed < len(rest):
                    raise _Refused(431, TRAILERS_TOO_LARGE)
            if fed < len(rest):
                self._parser.feed_data(rest[fed:])
        except httptools.HttpParserUpgrade as exc:
            # A later upgrade request in the same read: the bytes from it on
            # (the offset is in rest[fed:], the part fed last).
            after = rest[fed + exc.args[0] :] if exc.args else b""
            if self._held is not None:
                return after  # with a body of its own
            self._upgraded = True
            self._trailing = after
        return None

    def next_event(self) -> Event:
        if self._events:
            event = self._events.popleft()
            if isinstance(event, Request):
                self._queued_bytes -= self._queued_sizes.popleft()
            elif event is CONTINUE:
                # Its request is the next event if it is complete, else the
                # one llhttp is still reading (nothing comes between them).
                events = self._events
                head = events[0] if events else self._current
                assert isinstance(head, Request)
                self._expecting = head
            return event
        if self._failed is not None:
            return self._failed
        if self._judge is not None:
            event = self._judge.next_event()
            if event is NEED_DATA:
                return event
            # The judge refuses every head llhttp refused (a Request here would
            # mean a bad guess at where it starts: refuse it all the same).
            self._judge = None
            if not isinstance(event, ParseError):
                event = ParseError(400, "malformed request: invalid method")
            self._failed = event
            return event
        if self._closed:
            return CLOSED
        return NEED_DATA

    def continue_head(self) -> Request:
        head = self._expecting
        assert head is not None
        return head

    def start_next_cycle(self) -> None:
        """llhttp moves from message to message itself, except past an upgrade
        request: answered normally (refused, or an Upgrade we do not speak such
        as h2c), what followed it is HTTP again, for a fresh llhttp. Not before:
        while requests parsed before it (or it) wait, the bytes after it may
        be the new protocol's, handed over by ``trailing_data``."""
        if not self._upgraded or self._events:
            return
        pending, eof = self._trailing, self._eof_after_upgrade
        self._upgraded = False
        self._eof_after_upgrade = False
        self._trailing = b""
        self._parser = httptools.HttpRequestParser(self)
        if pending:
            self.feed(pending)
        if eof:
            self.feed(b"")

    def in_progress(self) -> bool:
        return self._in_message or bool(self._events) or self._judge is not None

    def buffered(self) -> int:
        held = self._partial_bytes if self._partial is not None else 0
        return (
            self._queued_bytes + held + (self._judge.buffered() if self._judge is not None else 0)
        )

    def trailing_data(self) -> bytes:
        return self._trailing

    def _fail(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        self._failed = ParseError(status, message, headers)

    def _fail_callback(self, exc: httptools.HttpParserCallbackError) -> None:
        """A callback raised: its own refusal, or a malformed request."""
        cause = exc.__context__
        if isinstance(cause, _Refused):
            self._fail(cause.status, cause.message, cause.headers)
        else:
            self._fail(400, "malformed request")

    # -- llhttp callbacks ----------------------------------------------

    def on_message_begin(self) -> None:
        self._in_message = True
        self._length = -1
        self._trailer_bytes = -1
        self._url = b""
        self._headers = {}
        self._header_count = 0
        self._head_bytes = 0
        self._body = b""
        self._size = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_bytes += len(url)
        if self._head_bytes > _MEASURED_HEAD_BOUND:
            raise _Refused(431, "request head too large")

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._trailer_bytes >= 0:
            self._on_trailer(name, value)
            return
        head_bytes = self._head_bytes + len(name) + len(value) + 4
        self._head_bytes = head_bytes
        if head_bytes > _MEASURED_HEAD_BOUND:
            raise self._version_first(431, "request head too large")
        count = self._header_count + 1
        self._header_count = count
        if count > MAX_HEADERS:
            raise self._version_first(431, "too many header fields")
        key = _NAME_KEYS.get(name)
        if key is None:
            key = name.decode("latin-1").lower()
        text = value.decode("latin-1").strip(" \t")
        headers = self._headers
        if key in headers:
            if key == "host" or (key == "content-length" and text != headers[key]):
                # Identical Content-Length repeats are one value (RFC 9110
                # 8.6), as h11 takes them; differing ones are smuggling.
                raise self._version_first(400, f"duplicate {key} header")
            if key == "content-length":
                return
            headers[key] = headers[key] + ", " + text
        else:
            headers[key] = text

    def _version_first(self, status: int, message: str) -> _Refused:
        """A refusal of a head's field, unless its target is one llhttp takes
        but we do not ("*?a") or its version one llhttp reads but we do not
        take (HTTP/2.0): h11's side answers those first, as llhttp does any
        other version it does not take."""
        refusal = self._head_version_refusal(self._parser)
        if refusal is not None:
            return _Refused(refusal.status, refusal.message)
        return _Refused(status, message)

    def _head_version_refusal(self, parser: httptools.HttpRequestParser) -> ParseError | None:
        """The refusal of the target or the version of the head being read,
        as h11's side judges them once the request line is in, before any
        field: "*?a" is no target (llhttp takes any starting with "*", see
        ``on_headers_complete``). Only on the way to a refusal."""
        if self._url[:1] == b"*" and self._url != b"*" and parser.get_method() != b"CONNECT":
            return ParseError(400, "malformed request target")
        return version_refusal(parser.get_http_version())

    def _on_trailer(self, name: bytes, value: bytes) -> None:
        """A field of a chunked body's trailer section: dropped, as h11 drops
        it. RFC 9110 6.5.1: trailers must not be merged into the header
        section; merged, a trailer ``Authorization`` would authenticate a
        request its head did not, and a trailer ``Host`` would be a duplicate.
        Bounded like a head (h11 refuses a longer incomplete trailer section)."""
        self._trailer_bytes += len(name) + len(value) + 4
        if self._trailer_bytes > _MEASURED_TRAILER_BOUND:
            raise _Refused(431, TRAILERS_TOO_LARGE)
        if trailer_closes(name, value):
            # llhttp itself takes this one: it refuses whatever follows on the
            # connection, so the connection closes after the answer.
            self._current.keep_alive = False

    def on_headers_complete(self) -> None:
        self._trailer_bytes = 0
        if self._body_only:
            held = self._held
            assert held is not None
            self._current = held  # the stand-in head: its body is the held request's
            length = held.headers.get("content-length")
            if length is not None and "transfer-encoding" not in held.headers:
                self._length = _length_value(length)  # where its body ends (see feed's ``left``)
            return
        headers = self._headers
        parser = self._parser
        url = self._url
        if url[:1] == b"*" and url != b"*" and parser.get_method() != b"CONNECT":
            # llhttp takes any target starting with "*" ("*#", "*?a"); RFC 9112
            # 3.2.4 has only "*" itself, and h11's side refuses the rest, first
            # (but for CONNECT, whose target h11's side leaves to the router).
            raise _Refused(400, "malformed request target")
        version = parser.get_http_version()
        if version != "1.1" and version != "1.0":  # version_refusal's None, without its call
            refusal = version_refusal(version)
            assert refusal is not None
            raise _Refused(refusal.status, refusal.message)
        chunked = "transfer-encoding" in headers
        if chunked:
            refusal = transfer_coding_refusal(headers["transfer-encoding"])
            if refusal is not None:
                raise _Refused(refusal.status, refusal.message)
        if version == "1.1" and "host" not in headers:
            raise _Refused(400, "missing Host header")
        length = headers.get("content-length")
        if length is not None:
            if chunked:
                raise _Refused(400, "both Content-Length and Transfer-Encoding")
            if not (length.isascii() and length.isdigit()):
                raise _Refused(400, "bad Content-Length")
            size = self._length = _length_value(length)
            if size > self._max_body:
                raise _Refused(413, body_too_large(self._max_body), headers)
        method = parser.get_method().decode("ascii")
        request = request_from_head(method, url.decode("latin-1"), headers, version)
        self._current = request
        if parser.should_upgrade() and (chunked or length not in (None, "0")):
            # llhttp will skip this body (see _read_held_body).
            self._body_framing = (
                b"transfer-encoding: chunked"
                if chunked
                else b"content-length: " + str(length).encode("ascii")
            )
        if (
            "expect" in headers
            and _expects_continue(headers["expect"])
            and version == "1.1"
            and (length not in (None, "0") or chunked)
        ):
            request.expect_continue = True
            self._events.append(CONTINUE)

    def on_chunk_header(self) -> None:
        self._chunk_at = self._size
        self._section = -1

    def on_chunk_complete(self) -> None:
        self._chunk_at = self._section = -1

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self._max_body:
            # The current request's fields (a held request's, not its stand-in's).
            raise _Refused(413, body_too_large(self._max_body), self._current.headers)
        self._body = add_body(self._body, body)

    def on_message_complete(self) -> None:
        request = self._current
        if self._body_framing:
            if not self._body_only:
                self._held = request  # its body comes after llhttp's upgrade stop
                return
            self._body_framing = b""
            self._held = None
            self._body_only = False
        request.body = body_bytes(self._body)
        self._body = b""
        self._in_message = False
        self._events.append(request)
        size = self._head_bytes + len(request.body) + QUEUED_REQUEST_COST
        self._queued_sizes.append(size)
        self._queued_bytes += size
