"""The fast parser: httptools (llhttp, C). Optional, the ``fast`` extra.

llhttp parses everything it is given at once, so pipelined requests queue up
here as complete requests. It refuses the request-smuggling shapes itself
(Content-Length with Transfer-Encoding, duplicate Content-Length, bad chunk
sizes); the head-size and header-count limits, which llhttp leaves to its
embedder, are enforced in the callbacks below with the same numbers as h11.

llhttp refuses a method it does not know while parsing, at its first byte
that no known method has, where h11 takes any token: that request's head is
handed to the h11 parser, which judges it as it judges every head (501 for a
well-formed request with an unknown method, 400 for a malformed one), so the
two parsers answer alike.
"""

from __future__ import annotations

from collections import deque
from typing import Final

import httptools

from syncd.http.h11_parser import H11Parser
from syncd.http.parser import (
    CLOSED,
    CONTINUE,
    MAX_HEAD_BYTES,
    MAX_HEADERS,
    NEED_DATA,
    Event,
    ParseError,
    add_body,
    body_bytes,
    body_too_large,
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
    return "100-continue" in (member.strip() for member in expect.lower().split(","))


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
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message


class HttptoolsParser:
    name = "httptools"

    def __init__(self, max_body: int) -> None:
        self._max_body = max_body
        self._parser = httptools.HttpRequestParser(self)
        self._events: deque[Event] = deque()
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
        """The reads of a request still in its request line, before its target
        (so possibly in a method llhttp will refuse), the first from a request
        boundary on; None when there is none, or where it starts is unknown."""
        self._partial_skip = 0
        """Requests in ``_partial[0]`` before that one."""
        self._partial_bytes = 0
        self._length = -1
        """The current request's Content-Length once its head is read (-1: none)."""
        self._trailer_bytes = -1
        """Bytes of the current request's trailer fields; -1 while its head is
        still being read (llhttp reports both through ``on_header``)."""

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
                self._fail(400, "connection closed in the middle of a request")
            else:
                self._closed = True
            return
        parser = self._parser
        # A request boundary before these bytes, or where the body in progress
        # ends in them (negative: unknown), and how many requests were
        # complete: what locates a request whose method llhttp refuses.
        at_boundary = not self._in_message and self._held is None
        left = self._length - self._size
        queued = len(self._queued_sizes)
        try:
            try:
                parser.feed_data(data)
            except httptools.HttpParserUpgrade as exc:
                offset = exc.args[0] if exc.args else len(data)
                if self._held is None:
                    self._upgraded = True
                    self._trailing = data[offset:]
                    return
                self._read_held_body(data[offset:])
        except _Refused as exc:
            self._fail(exc.status, exc.message)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            if isinstance(cause, _Refused):
                self._fail(cause.status, cause.message)
            else:
                self._fail(400, "malformed request")
        except httptools.HttpParserError as exc:
            if data.startswith(b"PRI * HTTP/2.0\r\n"):
                self._fail(505, "HTTP/2.0 is not supported")  # the HTTP/2 preface, as h11 answers
            elif str(exc) == "Invalid HTTP version":
                # A well-formed version llhttp does not take (HTTP/3.0): 505
                # for a later major version, as h11's side answers, not 400.
                refusal = version_refusal(parser.get_http_version())
                if refusal is None:  # not expected: llhttp takes 1.0 and 1.1
                    refusal = ParseError(400, f"malformed request: {exc}")
                self._fail(refusal.status, refusal.message)
            elif isinstance(exc, httptools.HttpParserInvalidMethodError) or (
                str(exc) in _METHOD_ERRORS
            ):
                completed = len(self._queued_sizes) - queued
                head = self._refused_head(
                    data, at_boundary, left, completed, parser is self._parser
                )
                if head is not None:
                    self._judge = H11Parser(self._max_body)
                    self._judge.feed(head)
                else:
                    # A read that completed a request begun in an earlier one
                    # (its head, or a chunked body), then began the refused
                    # one: where is unknowable.
                    self._fail(400, f"malformed request: {exc}")
            else:
                self._fail(400, f"malformed request: {exc}")
        else:
            if self._in_message and not self._url:
                completed = len(self._queued_sizes) - queued
                self._keep_partial(data, at_boundary, left, completed, parser is self._parser)
            elif self._partial is not None:
                self._partial = None
        if self._partial is not None and (self._failed is not None or self._judge is not None):
            self._partial = None

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
        """A read ended inside a request line, before its target: keep what
        ``_refused_head`` needs should its method be refused in a later read
        (rare: a request line split inside its method)."""
        start = self._from_boundary(data, at_boundary, left, completed) if same else None
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
        else:
            return None
        return first[_message_start(first, skip) if skip else 0 :] + rest

    def _read_held_body(self, rest: bytes) -> None:
        """Read the body of an upgrade offer with one. llhttp skips the body of
        every request with ``Connection: upgrade`` (httptools tells it to) and
        stops there. An offer we do not take (h2c, or any on a route that is
        not an upgrade) is an ordinary request, body included (RFC 9110 7.8),
        as h11 reads it: a fresh llhttp reads the body behind a stand-in head
        with the same framing, then goes on with what follows."""
        self._parser = httptools.HttpRequestParser(self)
        self._body_only = True
        head = b"POST / HTTP/1.1\r\nhost: x\r\n" + self._body_framing + b"\r\n\r\n"
        try:
            self._parser.feed_data(head + rest)
        except httptools.HttpParserUpgrade as exc:
            # A later upgrade request in the same read: the bytes from it on
            # (the offset counts the stand-in head too).
            offset = exc.args[0] if exc.args else len(head) + len(rest)
            self._upgraded = True
            self._trailing = (head + rest)[offset:]

    def next_event(self) -> Event:
        if self._events:
            event = self._events.popleft()
            if isinstance(event, Request):
                self._queued_bytes -= self._queued_sizes.popleft()
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

    def _fail(self, status: int, message: str) -> None:
        self._failed = ParseError(status, message)

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
        if self._head_bytes > MAX_HEAD_BYTES:
            raise _Refused(431, "request head too large")

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._trailer_bytes >= 0:
            self._on_trailer(name, value)
            return
        head_bytes = self._head_bytes + len(name) + len(value) + 4
        self._head_bytes = head_bytes
        if head_bytes > MAX_HEAD_BYTES:
            raise _Refused(431, "request head too large")
        count = self._header_count + 1
        self._header_count = count
        if count > MAX_HEADERS:
            raise _Refused(431, "too many header fields")
        key = _NAME_KEYS.get(name)
        if key is None:
            key = name.decode("latin-1").lower()
        text = value.decode("latin-1").strip(" \t")
        headers = self._headers
        if key in headers:
            if key == "host" or (key == "content-length" and text != headers[key]):
                # Identical Content-Length repeats are one value (RFC 9110
                # 8.6), as h11 takes them; differing ones are smuggling.
                raise _Refused(400, f"duplicate {key} header")
            if key == "content-length":
                return
            headers[key] = headers[key] + ", " + text
        else:
            headers[key] = text

    def _on_trailer(self, name: bytes, value: bytes) -> None:
        """A field of a chunked body's trailer section: dropped, as h11 drops
        it. RFC 9110 6.5.1: trailers must not be merged into the header
        section; merged, a trailer ``Authorization`` would authenticate a
        request its head did not, and a trailer ``Host`` would be a duplicate.
        Bounded like a head (h11 refuses a longer incomplete trailer section)."""
        self._trailer_bytes += len(name) + len(value) + 4
        if self._trailer_bytes > MAX_HEAD_BYTES:
            raise _Refused(431, "request trailers too large")
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
            return
        headers = self._headers
        parser = self._parser
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
            size = self._length = int(length)
            if size > self._max_body:
                raise _Refused(413, body_too_large(self._max_body))
        url = self._url
        if url[:1] == b"*" and url != b"*":
            # llhttp takes any target starting with "*" ("*#", "*?a"); RFC 9112
            # 3.2.4 has only "*" itself, and h11's side refuses the rest.
            raise _Refused(400, "malformed request target")
        method = parser.get_method().decode("ascii")
        request = request_from_head(method, url.decode("latin-1"), headers, version)
        self._current = request
        if (
            parser.should_upgrade()
            and method != "CONNECT"
            and (chunked or length not in (None, "0"))
        ):
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

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self._max_body:
            raise _Refused(413, body_too_large(self._max_body))
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
