"""The reference parser: h11, one ``h11.Connection`` per request cycle.

h11 only parses here; responses go out through our own writer. h11's state
machine expects to see our response before it parses the next request, so
instead of feeding it a response we do not send, each cycle starts a fresh
``h11.Connection`` primed with the bytes the previous one had not consumed.

h11 is given the bytes received a window at a time (``_WINDOW_BYTES``): the
rest is held here, in order, and given as a request needs it. h11 copies all
it holds whenever its buffer is read (``trailing_data``), which each request
does a few times, and a fresh h11 copies it again: with every byte received
given at once, each of many pipelined requests cost a copy of all the bytes
held behind it.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from typing import Final

import h11

from syncd.http.parser import (
    CLOSED,
    CONTINUE,
    KNOWN_METHODS,
    MAX_HEAD_BYTES,
    MAX_HEADERS,
    NEED_DATA,
    Event,
    ParseError,
    add_body,
    body_bytes,
    body_too_large,
    field_limit_end,
    method_refusal,
    request_from_head,
    trailer_closes,
    transfer_coding_refusal,
    version_refusal,
)
from syncd.http.request import Request


def _reason(exc: h11.RemoteProtocolError) -> str:
    """h11's words for what is wrong, without the Python repr of the offending
    bytes it appends ("illegal request line: bytearray(b'...')"): an internal
    detail that error bodies do not carry."""
    return str(exc).split(": bytearray(", 1)[0] or "malformed request"


_WINDOW_BYTES: Final = 4 * 1024
"""Bytes received that h11 is given at a time beyond what the request it
reads needs; the rest is held (see the module docstring). Each request
copies what h11 holds a few times (at most about twice this; more is held
again at the next request's start): a microsecond or two, however many bytes
are pipelined behind it, where a smaller window gives h11 more often. h11 is given more as the request
needs it (``_give_until``): before any of it is judged, its whole head, chunk
line or trailer section (or every byte held), so that the same bytes are
judged as if all had been given at once; its body as h11 reads it."""


class H11Parser:
    name = "h11"

    def __init__(self, max_body: int) -> None:
        self._max_body = max_body
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self._head: Request | None = None
        self._body: bytes | bytearray = b""
        self._size = 0
        self._failed: ParseError | None = None
        self._started = False
        self._chunk_line_next = False
        """The bytes h11 reads next (after a chunk's CRLF) are a chunk line."""
        self._chunk_crlf_due = b""
        """What h11 has still to skip, unread, of the CRLF after a chunk's data."""
        self._chunk_line_settled = False
        """The chunk line still coming was judged so far and ends in an
        extension's token (see ``_chunk_line_refusal``)."""
        self._trailers_next = False
        """The bytes h11 reads next are the trailer section."""
        self._line_judged = False
        """The request line of the head still coming has been judged whole."""
        self._line_end = -1
        """Where it ends (its CRLF), once judged."""
        self._framing_judged = 0
        """Bytes of the head still coming that ``_head_framing_refusal`` has
        judged."""
        self._newlines = 0
        """Line ends in the first ``_newlines_at`` bytes of the head still
        coming (``field_limit_end`` has nothing to find before 102)."""
        self._newlines_at = 0
        self._line_whole = False
        """The request line of the head still coming is whole and mended
        (see ``_collapse_request_line_spaces``)."""
        self._collapsed = 0
        """Spaces that mending took out of it."""
        self._line_searched = 0
        """Bytes of it searched for its end while it was not whole."""
        self._target_from = 0
        """While it is not whole: the bytes judged so far, if they end in a
        target that more of its characters cannot make wrong (see
        ``_settled_target``); 0 otherwise."""
        self._lines: _LinesSoFar | None = None
        """The field lines of the head or trailer section still coming."""
        self._fresh = 0
        """Bytes received since h11 last held back part of a body (a chunk
        line or trailers) that was judged: what h11 holds and we hold
        (``_held``) before their last ``_fresh`` bytes has been (see
        ``_held_body_refusal``)."""
        self._held: deque[bytes | memoryview] = deque()
        """Bytes received that h11 has not been given yet, in order: they
        follow what h11 holds (see ``_WINDOW_BYTES``)."""
        self._held_size = 0
        self._eof = False
        """The peer closed its side: h11 is told once it has every byte held."""
        self._give_next = _WINDOW_BYTES
        """What h11 is given next when it needs more of a body; doubled at
        each time, so that a body held behind a window costs a few rounds."""

    def feed(self, data: bytes) -> None:
        if data:
            self._started = True
            if data[0] in _CR_LF and self._at_request_start():
                # RFC 9112 2.2: empty lines before a request line are ignored
                # (llhttp does; h11 refuses them, "no request line received").
                data = data.lstrip(b"\r\n")
                if not data:
                    return
        self._fresh += len(data)
        if not data:
            self._eof = True
            if self._held_size:
                return  # h11 is told once it has every byte held (see _give)
        elif self._held_size:
            self._held.append(data)
            self._held_size += len(data)
            return
        elif len(data) > _WINDOW_BYTES:
            rest = memoryview(data)[_WINDOW_BYTES:]  # no copy of a large read
            self._held.append(rest)
            self._held_size = len(rest)
            data = data[:_WINDOW_BYTES]
        self._conn.receive_data(data)

    def _give(self, size: int) -> None:
        """Gives h11 the next ``size`` bytes held (all, if fewer), and the
        peer's close once it has them all."""
        self._conn.receive_data(self._take(size))
        if self._eof and not self._held_size:
            self._conn.receive_data(b"")

    def _take(self, size: int) -> bytes:
        """The next ``size`` bytes held (all, if fewer), no longer held."""
        held = self._held
        pieces: list[bytes | memoryview] = []
        while size > 0 and held:
            piece = held[0]
            if len(piece) <= size:
                held.popleft()
            else:
                held[0] = memoryview(piece)[size:]
                piece = piece[:size]
            pieces.append(piece)
            size -= len(piece)
        data = b"".join(pieces)
        self._held_size -= len(data)
        return data

    def _give_until(self, enough: Callable[[bytes], bool]) -> bytes:
        """Gives h11 held bytes (as many as it holds, at least a window, at
        a time) until what it holds is ``enough`` to be judged as all the
        bytes received would be, or every byte held is given; what it holds
        then."""
        data = self._conn.trailing_data[0]  # (h11 gives a copy)
        while self._held_size and not enough(data):
            self._give(max(_WINDOW_BYTES, len(data)))
            data = self._conn.trailing_data[0]
        return data

    def _at_request_start(self) -> bool:
        return (
            self._head is None
            and self._conn.their_state is h11.IDLE
            and not self._held_size
            and not self._conn.trailing_data[0]
        )

    def in_progress(self) -> bool:
        return self._head is not None or bool(self._held_size or self._conn.trailing_data[0])

    def buffered(self) -> int:
        return len(self._conn.trailing_data[0]) + self._held_size

    def trailing_data(self) -> bytes:
        return b"".join([self._conn.trailing_data[0], *self._held])

    def continue_head(self) -> Request:
        head = self._head  # one request at a time: CONTINUE came from its head
        assert head is not None
        return head

    def start_next_cycle(self) -> None:
        data, closed = self._conn.trailing_data
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self._head = None
        self._body = b""
        self._size = 0
        self._chunk_line_next = False
        self._chunk_crlf_due = b""
        self._chunk_line_settled = False
        self._trailers_next = False
        self._line_judged = False
        self._framing_judged = 0
        self._newlines = self._newlines_at = 0
        self._line_whole = False
        self._collapsed = 0
        self._line_searched = self._target_from = 0
        self._lines = None
        self._give_next = _WINDOW_BYTES
        data = bytes(data).lstrip(b"\r\n")  # empty lines between requests (see feed)
        while not data and self._held_size:
            data = self._take(_WINDOW_BYTES).lstrip(b"\r\n")
        if len(data) > 2 * _WINDOW_BYTES:
            # Bytes pipelined behind the request just read (received while
            # it was answered, or given it): held again, but a window.
            rest = memoryview(data)[_WINDOW_BYTES:]
            self._held.appendleft(rest)
            self._held_size += len(rest)
            data = data[:_WINDOW_BYTES]
        self._fresh = len(data) + self._held_size
        if data:
            self._conn.receive_data(data)
        self._eof = self._eof or closed
        if self._eof and not self._held_size:
            self._conn.receive_data(b"")

    def next_event(self) -> Event:
        if self._failed is not None:
            return self._failed
        head_data: bytes | bytearray = b""
        while True:
            if self._conn.their_state is h11.IDLE:
                if self._held_size:
                    # Its whole head (or every byte held): each check below
                    # looks no further than its blank line, its limit or all.
                    self._give_until(_has_head_end)
                self._collapse_request_line_spaces()
                head_data = self._conn.trailing_data[0]
                limit = MAX_HEAD_BYTES - self._collapsed  # in what h11 holds
                if len(head_data) > limit and head_data.find(b"\r\n\r\n", 0, limit) < 0:
                    # The head is longer than MAX_HEAD_BYTES (raw bytes,
                    # its blank line's too): answered for its first bytes
                    # up to the limit, as llhttp's side answers it.
                    self._failed = head_limit_refusal(bytes(head_data[:limit]))
                    return self._failed
                # The line ends of this head alone (up to its blank line,
                # within the limit), each counted once: not those of the
                # requests pipelined behind it, which were counted again for
                # every request before them.
                scan_to = min(len(head_data), limit)
                blank = head_data.find(b"\n\r\n", max(0, self._newlines_at - 2), scan_to)
                if blank >= 0:
                    scan_to = blank + 1
                if scan_to > self._newlines_at:
                    self._newlines += head_data.count(b"\n", self._newlines_at, scan_to)
                    self._newlines_at = scan_to
                limit_end = field_limit_end(head_data) if self._newlines > MAX_HEADERS else -1
                if limit_end >= 0:
                    self._failed = _field_limit_refusal(bytes(head_data[:limit_end]))
                    return self._failed
                refusal = _head_framing_refusal(head_data, self._framing_judged)
                if refusal is not None:
                    self._failed = _version_first(head_data) or refusal
                    return self._failed
            elif self._chunk_line_next or self._trailers_next:
                if self._chunk_line_next:
                    refusal = self._chunk_line_refusal()
                else:
                    refusal = self._trailers_refusal(0)
                if refusal is not None:
                    self._failed = refusal
                    return refusal
            try:
                event = self._conn.next_event()
            except h11.RemoteProtocolError as exc:
                if self._head is None and str(exc) == "bad Content-Length":
                    mended = _length_without_zeros(head_data)
                    if mended is not None:
                        # RFC 9110 8.6: 1*DIGIT, leading zeros and all (llhttp
                        # takes them); h11 takes at most 20 digits.
                        closed = self._conn.trailing_data[1]
                        self._conn = h11.Connection(
                            h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES
                        )
                        self._conn.receive_data(mended)
                        if closed:
                            self._conn.receive_data(b"")
                        head_data = b""
                        self._mended()
                        continue
                refusal = ParseError(exc.error_status_hint, _reason(exc))
                if self._head is None:
                    refusal = _version_first(head_data) or refusal
                self._failed = refusal
                return refusal
            if event is h11.NEED_DATA and self._held_size:
                # More of a body (h11 has read all it was given of it), or
                # the bytes after a chunk's data: not yet the end of what
                # was received, so nothing to judge or answer as such.
                self._give(self._give_next)
                self._give_next *= 2
                continue
            if event is h11.NEED_DATA or event is h11.PAUSED:
                if head_data and self._conn.their_state is h11.IDLE:
                    # A head still coming: llhttp answers a version it does
                    # not take as soon as it has read it, and a byte no
                    # request line or field name may hold as soon as it has
                    # read that.
                    # (The line judged whole, its version was judged with it.)
                    target_from = self._target_from
                    if target_from and _VISIBLE.fullmatch(head_data, target_from) is not None:
                        refusal = None  # more of a target that more cannot make wrong
                        self._target_from = len(head_data)
                    else:
                        refusal = (
                            None if self._line_judged else _version_first(head_data, early=True)
                        ) or self._head_so_far_refusal(head_data)
                        settled = refusal is None and not self._line_whole
                        if settled and _settled_target(head_data):
                            self._target_from = len(head_data)
                        else:
                            self._target_from = 0
                    if refusal is not None:
                        self._failed = refusal
                        return refusal
                    self._framing_judged = len(head_data)
                elif self._conn.their_state is h11.SEND_BODY:
                    refusal = self._held_body_refusal()
                    if refusal is not None:
                        self._failed = refusal
                        return refusal
                return NEED_DATA
            if isinstance(event, h11.Request):
                result = self._on_head(event)
                if result is not None:
                    return result
            elif isinstance(event, h11.Data):
                self._size += len(event.data)
                if self._size > self._max_body:
                    refused = self._head
                    self._failed = ParseError(
                        413, body_too_large(self._max_body), refused.headers if refused else None
                    )
                    return self._failed
                self._body = add_body(self._body, event.data)
                if event.chunk_end:
                    self._chunk_line_next = True
                    self._chunk_crlf_due = b"\r\n"
            elif isinstance(event, h11.EndOfMessage):
                request = self._head
                assert request is not None
                if event.headers and any(
                    trailer_closes(name, value) for name, value in event.headers.raw_items()
                ):
                    request.keep_alive = False  # as llhttp reads it (see httptools_parser)
                request.body = body_bytes(self._body)
                self._body = b""
                return request
            elif isinstance(event, h11.ConnectionClosed):
                return CLOSED

    def _held_body_refusal(self) -> ParseError | None:
        """h11 passes body bytes on as they come, so what it holds back is
        part of a chunk line or the trailers, where it waits for a CRLF that
        a bare LF never gives; llhttp refuses the LF at once. Only the bytes
        received since the last call are searched (with the two before them:
        a CRLF cut in two), so that trailers trickled in cost about what
        they cost whole."""
        pending = self._conn.trailing_data[0]  # every byte held given (see next_event)
        pos = max(0, len(pending) + self._held_size - self._fresh - 2)
        self._fresh = 0
        if _BARE_LF.search(pending, pos) is not None:
            return ParseError(400, "a line in the chunked body does not end with CRLF")
        bare_cr = _BARE_CR.search(pending, pos)
        if bare_cr is not None and bare_cr.start() != len(pending) - 1:  # a CRLF cut in two
            return ParseError(400, "a bare CR in the chunked body")
        return None

    def _chunk_line_refusal(self) -> ParseError | None:
        """h11 takes a chunk line of 1-20 hex digits, blanks after them and
        anything after a ";"; llhttp refuses blanks, a size past 64 bits and
        extensions that are not ``;name[=value]`` of tokens or quoted strings.
        The line is judged as llhttp judges it once it is whole, before h11
        reads it; before it, the CRLF that ends the chunk's data, which h11
        skips unread and llhttp asks for ("abc\n0" is no "abc" then "0")."""
        due = self._chunk_crlf_due
        if self._held_size:
            pending = self._give_until(lambda data: data.find(b"\r\n", len(due)) >= 0)
        else:
            pending = self._conn.trailing_data[0]
        start = 0
        if due:
            start = min(len(due), len(pending))
            if not due.startswith(pending[:start]):
                return ParseError(400, "a chunk's data does not end with CRLF")
            self._chunk_crlf_due = due[start:]  # h11 skips these bytes next
        fresh = self._fresh
        if (
            self._chunk_line_settled
            and not self._held_size  # else the line's end is in what h11 holds
            and fresh <= len(pending) - start
            and _TOKENS.fullmatch(pending, len(pending) - fresh) is not None
        ):
            return None  # more of an extension's token: taken so far, as before
        end = pending.find(b"\r\n", start)
        if end < 0:
            so_far = bytes(pending[start : start + MAX_HEAD_BYTES])
            refusal = _chunk_line_so_far_refusal(so_far)
            # In an extension's token (a name, a value, or quoted), more of
            # a token keeps it one llhttp takes so far.
            self._chunk_line_settled = (
                refusal is None and b";" in so_far and so_far[-1:] in _TOKEN_BYTES
            )
            return refusal
        self._chunk_line_next = False
        self._chunk_line_settled = False
        line = _CHUNK_LINE.fullmatch(bytes(pending[start:end]))
        if line is None or int(line.group(1), 16) > _MAX_LLHTTP_NUMBER:
            return ParseError(400, "malformed chunk line")
        digits = len(line.group(1))
        if digits > _H11_CHUNK_DIGITS:
            # RFC 9112 7.1: the size is 1*HEXDIG, leading zeros and all (llhttp
            # takes them); h11 takes at most 20 digits. A fresh h11, behind a
            # stand-in head of the same framing, reads the rest of the body
            # with the zeros dropped (a size within 64 bits has at most 16).
            rest = bytes(pending[start + digits :])
            size = line.group(1).lstrip(b"0") or b"0"
            closed = self._conn.trailing_data[1]
            conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
            conn.receive_data(_CHUNKED_STAND_IN + size + rest)
            if closed:
                conn.receive_data(b"")
            stand_in = conn.next_event()
            assert isinstance(stand_in, h11.Request), stand_in
            self._conn = conn
            end = len(size)
        if int(line.group(1), 16) == 0:  # the last chunk: its trailers follow
            self._trailers_next = True
            self._lines = None
            return self._trailers_refusal(end + 2)
        return None

    def _head_so_far_refusal(self, buffered: bytes | bytearray) -> ParseError | None:
        """What h11 will refuse in a head not yet whole, whatever follows, as
        llhttp refuses it as soon as it reads it: a request line, whole or
        not, that no bytes can make well-formed, then field lines (see
        ``_fields_so_far_refusal``). Answered as h11 answers the whole head
        (the version first). Cheap checks of what is in, not a second
        parser: what the head means is left to h11 once it is in."""
        line_end = self._line_end if self._line_judged else buffered.find(b"\r\n")
        if line_end < 0:
            refusal = _line_so_far_refusal(bytes(buffered[:MAX_HEAD_BYTES]))
        else:
            refusal = None if self._line_judged else _line_refusal(buffered, line_end)
            self._line_judged = True
            self._line_end = line_end
            if refusal is None:
                refusal = _fields_so_far_refusal(self._lines_so_far(), buffered, line_end + 2)
        if refusal is None:
            return None
        return _version_first(buffered) or refusal

    def _lines_so_far(self) -> _LinesSoFar:
        if self._lines is None:
            self._lines = _LinesSoFar()
        return self._lines

    def _trailers_refusal(self, start: int) -> ParseError | None:
        """A bare LF in a trailer section that arrived whole: h11 takes it
        (the NEED_DATA check above sees only one still incomplete), llhttp
        refuses it. Judged once the section's blank line is in, before h11
        reads it. ``start``: where the section starts in what h11 holds (0
        once h11 has read the last chunk's line)."""
        pending = self._conn.trailing_data[0]  # (h11 gives a copy)
        # Not before what was searched at the last read (see _held_body_refusal).
        searched = max(start, len(pending) + self._held_size - self._fresh - 2)
        if self._held_size:

            def whole(data: bytes) -> bool:
                """The section's end, or its limit, is in ``data``."""
                return len(data) >= start + 2 and (
                    data[start : start + 1] == b"\n"
                    or data[start : start + 2] == b"\r\n"
                    or len(data) - start > MAX_HEAD_BYTES
                    or _BLANK_LINE.search(data, searched) is not None
                )

            pending = self._give_until(whole)
        if pending[start : start + 1] == b"\n" or pending[start : start + 2] == b"\r\n":
            end = pending.index(b"\n", start) + 1  # no trailers: the blank line at once
        else:
            blank = _BLANK_LINE.search(pending, searched)
            end = len(pending) if blank is None else blank.end()
            if end - start > MAX_HEAD_BYTES:
                # Longer than MAX_HEAD_BYTES (raw bytes, its blank line's
                # too): answered for its first bytes up to the limit, as
                # llhttp's side answers it.
                return trailer_limit_refusal(bytes(pending[start : start + MAX_HEAD_BYTES]))
            if blank is None:
                return _trailers_so_far_refusal(self._lines_so_far(), pending, start)
        self._trailers_next = False
        section = pending[start:end]
        if section.count(b"\n") != section.count(b"\r\n"):
            return ParseError(400, "a line in the chunked body does not end with CRLF")
        if section.count(b"\r") != section.count(b"\r\n"):
            return ParseError(400, "a bare CR in the chunked body")
        if _CONTROL.search(section) is not None:
            return ParseError(400, "a control character in the trailers")
        if section[:1] in (b" ", b"\t") or b"\n " in section or b"\n\t" in section:
            # Obsolete line folding, refused as in a head (llhttp does too).
            return ParseError(400, "obsolete line folding in the trailers")
        if _FRAMING_TRAILER.search(section) is not None:
            # RFC 9110 6.5.1: framing fields cannot be trailers; llhttp
            # refuses them.
            return ParseError(400, "a framing field in the trailers")
        return None

    def _collapse_request_line_spaces(self) -> None:
        """Runs of spaces between the request line's three parts are one, as
        llhttp reads them ("GET  /x HTTP/1.1"; RFC 9112 3 allows parsing on
        whitespace-delimited words); h11 refuses them. Before h11 has read the
        request, a fresh h11 takes the bytes with the line mended."""
        if self._line_whole:
            return
        data, closed = self._conn.trailing_data
        line_end = data.find(b"\r\n", max(0, self._line_searched - 1))  # none before
        if line_end < 0:
            self._line_searched = len(data)
            return
        self._line_whole = True
        if data.find(b"  ", 0, line_end) < 0:
            return
        words = _SPACED_REQUEST_LINE.fullmatch(bytes(data[:line_end]))
        if words is None:
            return  # spaces at either end, or inside a part: h11 refuses it, as llhttp does
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        line = b" ".join(words.groups())
        self._collapsed = line_end - len(line)
        conn.receive_data(line + bytes(data[line_end:]))
        if closed:
            conn.receive_data(b"")
        self._conn = conn
        self._mended()

    def _mended(self) -> None:
        """The bytes h11 holds were mended (shorter): what was judged of them
        by offset is judged again."""
        self._newlines = self._newlines_at = 0
        self._framing_judged = 0

    def _on_head(self, event: h11.Request) -> Event | None:
        # raw_items() is a plain list: iterating h11's Headers goes through
        # Sequence.__iter__ and costs twice as much.
        items = event.headers.raw_items()
        method = event.method.decode("ascii")
        target = event.target
        version = event.http_version.decode("ascii")
        # llhttp reads the target, then the version, before the fields, and
        # refuses a malformed target or a version it does not take there:
        # first here too (HTTP/7.0 with a bad field is 505, not 400).
        refusal = _target_refusal(target, method) or version_refusal(version)
        if refusal is not None:
            self._failed = refusal
            return refusal
        if len(items) > MAX_HEADERS:
            self._failed = ParseError(431, "too many header fields")
            return self._failed
        headers: dict[str, str] = {}
        for raw_name, raw_value in items:
            name = raw_name.decode("latin-1").lower()
            value = raw_value.decode("latin-1")
            if name in headers:
                headers[name] = headers[name] + ", " + value
            else:
                headers[name] = value
        length = headers.get("content-length")
        if length is not None and "transfer-encoding" in headers:
            # RFC 9112 6.1: both together is the classic smuggling shape; h11
            # would let Transfer-Encoding win, we refuse like llhttp does.
            self._failed = ParseError(400, "both Content-Length and Transfer-Encoding")
            return self._failed
        if length is not None and int(length) > self._max_body:
            if int(length) > _MAX_LLHTTP_NUMBER:
                # h11 takes 20 digits, llhttp a number within 64 bits.
                self._failed = ParseError(400, "bad Content-Length")
            else:
                self._failed = ParseError(413, body_too_large(self._max_body), headers)
            return self._failed
        if method not in KNOWN_METHODS:
            refusal = method_refusal(method)
        if refusal is None and "transfer-encoding" in headers:
            refusal = transfer_coding_refusal(headers["transfer-encoding"])
        if refusal is not None:
            self._failed = refusal
            return refusal
        request = request_from_head(method, target.decode("latin-1"), headers, version)
        self._head = request
        self._chunk_line_next = "transfer-encoding" in headers  # chunked: the one coding taken
        if self._conn.they_are_waiting_for_100_continue and (
            length not in (None, "0") or "transfer-encoding" in headers
        ):
            # Only for a body still to come, as llhttp's side does: h11 waits
            # for a 100 whatever the framing, even with no body at all.
            request.expect_continue = True
            return CONTINUE
        return None


def _target_refusal(target: bytes, method: str) -> ParseError | None:
    """h11 takes any run of visible characters as a target; llhttp only the
    forms of RFC 9112 3.2 (and the router would read "x/v1/..." as "/v1/...").
    In an absolute form's authority llhttp refuses what RFC 3986 3.2 has no
    place for: "http://h#x/a" would otherwise be read as the path "/a". It
    reads a CONNECT target as an authority up to its first "/" or "?" (RFC
    9112 3.2.3), and refuses the same there ("a|b", "*#")."""
    if method == "CONNECT":
        authority = target
    elif target[:1] == b"/" or target == b"*":
        return None
    else:
        absolute = _ABSOLUTE_FORM.match(target)
        if absolute is None:
            return ParseError(400, "malformed request target")
        authority = target[absolute.end() :]
    authority = _AUTHORITY_END.split(authority, 1)[0]
    if _NOT_IN_AUTHORITY.search(authority) is not None:
        return ParseError(400, "malformed request target")
    return None


def _length_without_zeros(data: bytes | bytearray) -> bytes | None:
    """``data`` (from a request's start) with the leading zeros of its
    Content-Length value dropped, if it has more digits than h11 takes and
    fewer without them; None otherwise."""
    at = bytes(data[:MAX_HEAD_BYTES]).lower().find(b"\r\ncontent-length:")
    if at < 0:
        return None
    start = at + len(b"\r\ncontent-length:")
    end = data.find(b"\r\n", start)
    if end < 0:
        return None
    value = bytes(data[start:end]).strip(b" \t")
    short = value.lstrip(b"0") or b"0"
    if not (value.isdigit() and len(value) > _H11_LENGTH_DIGITS >= len(short)):
        return None
    return bytes(data[:start]) + b" " + short + bytes(data[end:])


def _version_first(buffered: bytes | bytearray, early: bool = False) -> ParseError | None:
    """On the way to refusing a head: llhttp refuses a version it does not
    take (505 for HTTP/2 and later) as soon as the request line is read,
    before the fields, so a well-formed request line with such a version is
    answered for its version, whatever follows (an HTTP/7.0 message's fields
    need not follow HTTP/1.1's rules), or even before the line has ended. A
    throwaway h11 judges the line up to its version alone. ``early``: the
    head is not all in, and llhttp reads on past HTTP/0.9 and HTTP/2.0 (and
    refuses them once the head is in)."""
    line_end = buffered.find(b"\n")
    line = bytes(buffered[: line_end if line_end >= 0 else MAX_HEAD_BYTES]).rstrip(b"\r")
    if line[-8:] in (b"HTTP/1.1", b"HTTP/1.0"):
        return None
    words = _VERSIONED_REQUEST_LINE.match(line)
    if words is None:
        return None
    event = _judged(b" ".join(words.groups()) + b"\r\nhost: x\r\n\r\n")
    if not isinstance(event, h11.Request):
        return None
    refusal = _target_refusal(event.target, event.method.decode("ascii"))
    version = event.http_version.decode("ascii")
    if early and version in _VERSIONS_READ_ON:
        return refusal
    return refusal or version_refusal(version)


def _settled_target(buffered: bytes | bytearray) -> bool:
    """Whether a request line not yet ended, judged fine so far, ends in a
    target that more visible characters cannot make one that
    ``_line_so_far_refusal`` refuses: an origin form (or "*..."), or an
    authority that has ended (absolute form, CONNECT). Then only what comes
    after it needs judging, so that a long target trickled in costs about
    what it costs whole."""
    if b"\n" in buffered:
        return False
    words = _REQUEST_LINE_SO_FAR.fullmatch(bytes(buffered))
    if words is None:
        return False
    method, target, after = words.groups()
    if not target or after is not None:
        return False
    if method != b"CONNECT" and target[:1] in (b"/", b"*"):
        return True
    if method == b"CONNECT":
        authority = target
    else:
        absolute = _ABSOLUTE_FORM.match(target)
        if absolute is None:
            return False
        authority = target[absolute.end() :]
    return _AUTHORITY_END.search(authority) is not None


_VISIBLE = re.compile(rb"[\x21-\x7e]*")


def _line_so_far_refusal(line: bytes) -> ParseError | None:
    """A request line not yet ended: its method a token, its target visible
    characters of a form llhttp takes (see ``_target_refusal``), its version
    the start of ``HTTP/x.y``."""
    words = _REQUEST_LINE_SO_FAR.fullmatch(line)
    if words is None:
        return ParseError(400, "illegal request line")
    method, target, after = words.groups()
    if not target:
        return None
    if after is not None:  # the whole target
        return _target_refusal(target, method.decode("ascii"))
    if method == b"CONNECT" or _ABSOLUTE_FORM.match(target):
        return _target_refusal(target, method.decode("ascii"))  # its authority so far
    if target[:1] in (b"/", b"*") or _SCHEME_SO_FAR.fullmatch(target):
        return None
    return ParseError(400, "malformed request target")


class _LinesSoFar:
    """Field lines (of a head or a trailer section) as they arrive: each
    byte is judged once, so that a head trickled in a byte at a time costs
    about what it costs whole, however long its lines: whole lines for
    their syntax, the last line, not yet whole, for its name so far."""

    __slots__ = ("codings", "colon", "judged", "name", "names", "scanned")

    def __init__(self) -> None:
        self.judged = 0
        """Bytes of whole lines judged, from the first field line on."""
        self.scanned = 0
        """Bytes, from the first field line on, searched for a control
        character, a line end and a colon."""
        self.colon = -1
        """Where the colon of the line not yet whole is (from the first field
        line on), once it is in; -1 before."""
        self.name = b""
        """That line's name, lower-cased, once its colon is in."""
        self.names: list[bytes] = []
        """The names of the whole lines, lower-cased."""
        self.codings: list[bytes] = []
        """Their Transfer-Encoding values."""

    def take(
        self, data: bytes | bytearray, start: int
    ) -> tuple[list[tuple[bytes, bytes]], tuple[bytes, bytes] | None] | None:
        """The field lines of ``data`` from ``start`` on: the whole ones not
        judged before, as (lower-cased name, value and CR) pairs, and the
        name and value so far of the last one once its colon is in (its
        value only for Content-Length and Transfer-Encoding, empty for any
        other: no caller reads it, and copying it at every read would cost
        a trickled long line its length squared). None if a name, whole or
        not, is no token or a control character came (h11 takes any value
        without one, see ``_head_framing_refusal``)."""
        begin = start + self.judged
        scanned = start + self.scanned
        if _CONTROL.search(data, scanned) is not None:
            return None
        self.scanned = len(data) - start
        end = data.rfind(b"\n", scanned) + 1  # none before: those lines were judged
        new: list[tuple[bytes, bytes]] = []
        if end > begin:
            lines = bytes(data[begin:end])
            if _FIELD_LINES.fullmatch(lines) is None:
                return None
            new = [(name.lower(), value) for name, value in _FIELD.findall(lines)]
            self.judged += len(lines)
            self.names += [name for name, _ in new]
            self.codings += [v.rstrip(b"\r") for name, v in new if name == b"transfer-encoding"]
            self.colon = -1
            scanned = end
        else:
            end = begin
        if len(data) > end and data[end] == _CR_LF[0]:  # the blank line's CR, nothing after
            return (new, None) if len(data) == end + 1 else None
        if self.colon < 0:
            colon = data.find(b":", scanned)
            if colon < 0:  # a name so far
                return (new, None) if _TOKENS.fullmatch(data, scanned) is not None else None
            if colon == end or _TOKENS.fullmatch(data, scanned, colon) is None:
                return None
            self.colon = colon - start
            self.name = bytes(data[end:colon]).lower()
        name = self.name
        value = bytes(data[start + self.colon + 1 :]) if name in _FRAMING_NAMES else b""
        return new, (name, value)


def head_limit_refusal(head: bytes) -> ParseError:
    """The answer to a head longer than MAX_HEAD_BYTES (from its request
    line's first byte to its blank line's last), given its first
    MAX_HEAD_BYTES bytes: the refusal of what is wrong in them, as if no more
    had come (the version first, as ever), else 431. The first problem in
    byte order wins, whichever parser reads it and wherever the reads are
    cut: the limit is passed at the byte after these."""
    judge = H11Parser(0)
    judge.feed(head)
    event = judge.next_event()
    refusal = event if isinstance(event, ParseError) else None
    return _version_first(head) or refusal or ParseError(431, "request head too large")


def trailer_limit_refusal(section: bytes) -> ParseError:
    """The answer to a trailer section longer than MAX_HEAD_BYTES (from the
    last chunk's line end to its blank line's last byte), given its first
    MAX_HEAD_BYTES bytes: the refusal of what is wrong in them, as if no
    more had come, else 431. As for a head (``head_limit_refusal``), the
    first problem in byte order wins whichever parser reads it and wherever
    the reads are cut."""
    judge = H11Parser(0)
    judge.feed(_CHUNKED_STAND_IN + b"0\r\n" + section)
    event = judge.next_event()
    return event if isinstance(event, ParseError) else ParseError(431, TRAILERS_TOO_LARGE)


def _field_limit_refusal(head: bytes) -> ParseError:
    """The answer to a head whose field line past MAX_HEADERS is whole, the
    head up to that line's end (see ``field_limit_end``): what is refused in
    it as it arrives (that line judged only as llhttp judges its bytes, see
    ``_fields_so_far_refusal``), else 431; the version first, as ever."""
    refusal = _head_framing_refusal(head)
    if refusal is None:
        line_end = head.find(b"\r\n")
        refusal = _line_refusal(head, line_end) or _fields_so_far_refusal(
            _LinesSoFar(), head, line_end + 2
        )
    return _version_first(head) or refusal or ParseError(431, "too many header fields")


def _fields_so_far_refusal(
    fields: _LinesSoFar, buffered: bytes | bytearray, start: int
) -> ParseError | None:
    """The field lines of a head not yet whole (from ``start`` on): a name
    that is no token, Host twice, Content-Length with Transfer-Encoding, a
    Content-Length that is no number, a Transfer-Encoding list no later
    bytes can mend. The line past MAX_HEADERS (whole or not) is judged only
    as llhttp judges its bytes as they arrive: what it says (Host again, an
    empty coding) comes after the count (see ``field_limit_end``)."""
    taken = fields.take(buffered, start)
    if taken is None:
        return ParseError(400, "illegal header line")
    new, partial = taken
    names = fields.names if partial is None else [*fields.names, partial[0]]
    if names[:MAX_HEADERS].count(b"host") > 1:  # past it, our check after the count
        return ParseError(400, "duplicate host header")
    counted = names[:MAX_HEADERS]
    if counted.count(b"content-length") > 1:
        return ParseError(400, "duplicate content-length header")
    if len(names) > MAX_HEADERS and names[-1] == b"content-length" and b"content-length" in counted:
        # Past MAX_HEADERS, llhttp refuses a repeat at its first digit (an
        # empty one once the head is in, after the count).
        value = partial[1] if partial is not None else new[-1][1] if new else b""
        if any(byte in _DIGITS for byte in value):
            return ParseError(400, "duplicate content-length header")
    if b"content-length" in names:
        if b"transfer-encoding" in names:
            return ParseError(400, "both Content-Length and Transfer-Encoding")
        first = len(fields.names) - len(new)  # the index of the first new line
        for at, (name, value) in enumerate(new, first):
            # Past MAX_HEADERS, an empty value is judged after the count (llhttp
            # judges it once the head is in), a character no number has at once.
            pattern = _LENGTH_VALUE if at < MAX_HEADERS else _UNCOUNTED_LENGTH_VALUE
            if name == b"content-length" and pattern.fullmatch(value) is None:
                return ParseError(400, "bad Content-Length")
        so_far = _LENGTH_VALUE_SO_FAR if len(names) <= MAX_HEADERS else _UNCOUNTED_LENGTH_VALUE
        if (
            partial is not None
            and partial[0] == b"content-length"
            and so_far.fullmatch(partial[1]) is None
        ):
            return ParseError(400, "bad Content-Length")
    elif b"transfer-encoding" in names:
        codings = fields.codings
        if len(names) > MAX_HEADERS and names[-1] == b"transfer-encoding":
            # Past MAX_HEADERS, llhttp judges an empty value after the count
            # (at the next line's first byte), the list at the value's first byte.
            value = partial[1].rstrip(b"\r") if partial is not None else codings[-1]
            if partial is None:
                codings = codings[:-1]
            if not value.strip(b" \t"):
                partial = None
            elif partial is None:
                partial = (b"transfer-encoding", value)
        if any(not value.strip(b" \t") for value in codings):
            # llhttp refuses an empty value at the next line's first byte.
            return ParseError(400, "an empty transfer coding")
        return _codings_so_far_refusal(codings, partial)
    return None


def _codings_so_far_refusal(
    codings: list[bytes], partial: tuple[bytes, bytes] | None
) -> ParseError | None:
    """The Transfer-Encoding lines of a head not yet whole (``codings``, and
    the ``partial`` line's if it is one), one list (RFC 9110 5.3), refused
    as llhttp refuses it as it arrives: chunked (blanks before it, spaces
    after it) before another member. The rest (an empty member of a list,
    chunked then a tab, an unknown coding) llhttp judges once the head is
    in, after the field count: so does ``_head_framing_refusal``."""
    values = codings
    if partial is not None and partial[0] == b"transfer-encoding":
        values = [*codings, partial[1].rstrip(b"\r")]
    members = b", ".join(values).split(b",")
    if any(member.lstrip(b" \t").rstrip(b" ").lower() == b"chunked" for member in members[:-1]):
        return ParseError(400, "chunked is not the last transfer coding")
    return None


def _chunk_line_so_far_refusal(line: bytes) -> ParseError | None:
    """A chunk line not yet ended: a size of hex digits within 64 bits, then
    extensions, as ``_chunk_line_refusal`` will judge it once whole."""
    if line[-1:] == b"\r":
        whole = _CHUNK_LINE.fullmatch(line, 0, len(line) - 1)
        size = whole.group(1) if whole is not None else None
    else:
        so_far = _CHUNK_LINE_SO_FAR.fullmatch(line)
        size = so_far.group(1) if so_far is not None else None
    if size is None or (size and int(size, 16) > _MAX_LLHTTP_NUMBER):
        return ParseError(400, "malformed chunk line")
    return None


def _trailers_so_far_refusal(
    fields: _LinesSoFar, pending: bytes | bytearray, start: int
) -> ParseError | None:
    """A trailer section not yet whole (from ``start`` on), judged as a
    head's fields are and as ``_trailers_refusal`` will judge it: a name
    that is no token (a line folded on starts with a blank), a control
    character, a framing field."""
    taken = fields.take(pending, start)
    if taken is None:
        return ParseError(400, "illegal trailer line")
    new, partial = taken
    names = [name for name, _ in new] + ([partial[0]] if partial is not None else [])
    if any(name in _FRAMING_NAMES for name in names):
        return ParseError(400, "a framing field in the trailers")
    return None


def _line_refusal(buffered: bytes | bytearray, line_end: int) -> ParseError | None:
    """What h11 will say of a complete request line (ending at ``line_end``)
    once the head is in; one of other than three parts is refused at once
    (llhttp refuses it at once but two parts, which it reads as HTTP/0.9 and
    refuses once the head is in). A throwaway h11 judges a line of three
    parts alone."""
    if _SPACED_REQUEST_LINE.fullmatch(bytes(buffered[:line_end])) is None:
        return ParseError(400, "illegal request line")
    event = _judged(bytes(buffered[:line_end]) + b"\r\nhost: x\r\n\r\n")
    if not isinstance(event, h11.Request):
        return event
    return _target_refusal(event.target, event.method.decode("ascii"))


def _malformed_but_coding(head: bytes) -> ParseError | None:
    """What is wrong with a complete request ``head`` before its unknown
    transfer coding: llhttp reads the request line and every field before it
    judges the coding (501), so a malformed line, a field with bad syntax or
    an unsupported version is answered first (400 or 505). h11 answers the
    coding as soon as it sees it; a throwaway h11 reads the head with the
    coding made ``chunked`` to find what llhttp finds first."""
    lines = []
    coding_seen = False
    for line in head.split(b"\r\n"):
        if line[:18].lower() == b"transfer-encoding:":
            if coding_seen:
                continue  # the codings of every line are one list
            coding_seen = True
            line = b"transfer-encoding: chunked"
        lines.append(line)
    if not any(line[:5].lower() == b"host:" for line in lines[1:]):
        lines.append(b"host: x")  # llhttp's side asks for Host after the coding
    event = _judged(b"\r\n".join(lines) + b"\r\n\r\n")
    if not isinstance(event, h11.Request):
        return event
    method = event.method.decode("ascii")
    return _target_refusal(event.target, method) or version_refusal(
        event.http_version.decode("ascii")
    )


def _judged(head: bytes) -> h11.Request | ParseError | None:
    """What a throwaway h11 makes of a whole request ``head``: its request,
    its refusal, or None when it reads no request from it."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    conn.receive_data(head)
    try:
        event = conn.next_event()
    except h11.RemoteProtocolError as exc:
        return ParseError(exc.error_status_hint, _reason(exc))
    return event if isinstance(event, h11.Request) else None


_SPACED_REQUEST_LINE = re.compile(rb"([^ ]+) +([^ ]+) +([^ ]+)")
"""A request line's method, target and version, spaces between them."""
_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]"
_REQUEST_LINE_SO_FAR = re.compile(
    rb"("
    + _TOKEN
    + rb"*)(?:(?<=[^ ]) +([\x21-\x7e]*)"
    + rb"( +(?:H(?:T(?:T(?:P(?:/(?:[0-9](?:\.(?:[0-9]\r?)?)?)?)?)?)?)?)?)?)?"
)
"""The start of a request line that h11 may still take (with runs of spaces
made one, see ``_collapse_request_line_spaces``): a token, a target of visible
characters, the start of ``HTTP/x.y`` and its CR. Its groups: the method, the
target, what follows the target (None while the target may go on)."""
_SCHEME_SO_FAR = re.compile(rb"[A-Za-z]*(?::/?)?")
"""The start of an absolute-form target, before its "://"."""
_FIELD = re.compile(rb"^(" + _TOKEN + rb"+):([^\n]*)\n", re.MULTILINE)
"""A whole field line: its name, and its value and CR."""
_TOKENS = re.compile(_TOKEN + rb"*")
_TOKEN_BYTES = frozenset(bytes([c]) for c in range(256) if re.fullmatch(_TOKEN, bytes([c])))
_FRAMING_NAMES = frozenset({b"content-length", b"transfer-encoding"})
_LENGTH_VALUE = re.compile(rb"[ \t]*[0-9]+[ \t]*\r")
_LENGTH_VALUE_SO_FAR = re.compile(rb"[ \t]*(?:[0-9]+[ \t]*\r?)?")
_DIGITS = frozenset(b"0123456789")
_UNCOUNTED_LENGTH_VALUE = re.compile(rb"[ \t]*(?:[0-9]+[ \t]*)?\r?")
"""A Content-Length value past MAX_HEADERS, whole or not, as llhttp judges
its bytes as they arrive (empty too: it judges that once the head is in)."""
_FIELD_LINES = re.compile(rb"(?:" + _TOKEN + rb"+:[^\n]*\n)*")
"""Whole field lines of token names (their line ends and values are judged
by ``_head_framing_refusal``)."""
_VERSIONS_READ_ON = frozenset({"0.9", "2.0"})
"""Versions llhttp reads a head of (refused once it is in)."""
_VERSIONED_REQUEST_LINE = re.compile(rb"([^ ]+) +([^ ]+) +(HTTP/[0-9]\.[0-9])")
"""A request line up to its version, which llhttp judges as soon as it is read."""
_QUOTED = rb'"(?:[\t \x21\x23-\x5b\x5d-\x7e\x80-\xff]|\\[\t \x21-\x7e\x80-\xff])*"'
_EXT_VALUE = rb"(?:" + _TOKEN + rb"*|" + _QUOTED + rb")"
_CHUNK_LINE = re.compile(
    rb"([0-9A-Fa-f]+)(?:;(?:"
    + _TOKEN
    + rb"+(?:="
    + _EXT_VALUE
    + rb")?|="
    + _EXT_VALUE
    + rb")?)*(?<!;)"
)
"""A chunk line as llhttp takes it: hex digits, then extensions after ";":
``name``, ``name=value`` (a token, empty, or a quoted string), ``=value`` or
nothing, but not a ";" last; no blanks anywhere."""
_QUOTED_SO_FAR = rb'"(?:[\t \x21\x23-\x5b\x5d-\x7e\x80-\xff]|\\[\t \x21-\x7e\x80-\xff])*\\?'
_CHUNK_LINE_SO_FAR = re.compile(
    rb"([0-9A-Fa-f]*)(?:(?<=[0-9A-Fa-f])(?:;(?:"
    + _TOKEN
    + rb"+(?:="
    + _EXT_VALUE
    + rb")?|="
    + _EXT_VALUE
    + rb")?)*;"
    + _TOKEN
    + rb"*(?:=(?:"
    + _EXT_VALUE
    + rb"|"
    + _QUOTED_SO_FAR
    + rb"))?)?"
)
"""The start of a chunk line as ``_CHUNK_LINE`` takes it: its size so far,
or its size, whole extensions and the last one so far (a quoted string not
yet closed too)."""
_BLANK_LINE = re.compile(rb"\n\r?\n")
_FRAMING_TRAILER = re.compile(
    rb"(?:^|\n)(?:content-length|transfer-encoding)[ \t]*:", re.IGNORECASE
)
"""A Content-Length or Transfer-Encoding field in a trailer section."""
"""The end of a trailer section, as h11 finds it (bare LFs included)."""
_H11_CHUNK_DIGITS = 20
_H11_LENGTH_DIGITS = 20
"""The most digits h11 reads in a Content-Length."""
"""The most hex digits h11 reads in a chunk size."""
TRAILERS_TOO_LARGE = "request trailers too large"
"""The 431's message for a trailer section past MAX_HEAD_BYTES."""
_CHUNKED_STAND_IN = b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
"""A head with chunked framing, for a fresh h11 to read a body behind."""
_MAX_LLHTTP_NUMBER = 2**64 - 1
"""llhttp's bound on a chunk size and a Content-Length (h11 takes up to 20
digits, hex or decimal)."""

_CR_LF = (0x0D, 0x0A)
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""Control characters but HTAB, CR and LF (those three have their own rules)."""
_ABSOLUTE_FORM = re.compile(rb"[A-Za-z]+://")
_AUTHORITY_END = re.compile(rb"[/?]")
_NOT_IN_AUTHORITY = re.compile(rb'["#<>\\^`{|}]')
"""Visible characters llhttp refuses in an absolute form's authority."""
"""The start of an absolute-form request target (llhttp's schemes are letters)."""


def _has_head_end(data: bytes) -> bool:
    """A head's blank line is in ``data`` (h11 holds a head from its start)."""
    return b"\r\n\r\n" in data


def _head_framing_refusal(buffered: bytes | bytearray, judged: int = 0) -> ParseError | None:
    """What h11 tolerates in a request head and llhttp does not: a bare LF as a
    line end (RFC 9112 2.2 MAY) and obsolete line folding (RFC 9112 5.2: reject
    or unfold). Refusing both keeps the two parsers' answers identical.
    ``judged``: the bytes at the start of a head still coming that an
    earlier call found fine; only what follows them is judged, for its line
    ends, control characters and folding (``_fields_so_far_refusal`` judges
    its fields), so that a head trickled in costs about what it costs whole."""
    end = buffered.find(b"\r\n\r\n", max(0, judged - 3))  # none before: it was judged
    if end < 0 and judged:
        return _line_ends_so_far_refusal(buffered, max(0, judged - 2))
    head = bytes(buffered if end < 0 else buffered[:end])
    refusal = _line_ends_refusal(head, end >= 0)
    if refusal is not None:
        return refusal
    lowered = head.lower()

    length_at = lowered.find(b"\r\ncontent-length:")
    if length_at >= 0 and end >= 0:  # a head still coming: see _fields_so_far_refusal
        # h11 folds identical repeats ("3" twice, or "3, 3") into one value;
        # llhttp refuses both, and so do we.
        if lowered.count(b"\r\ncontent-length:") > 1:
            return ParseError(400, "duplicate content-length header")
        line_end = lowered.find(b"\r\n", length_at + 2)
        if b"," in lowered[length_at + 2 : line_end if line_end >= 0 else len(lowered)]:
            return ParseError(400, "a list in content-length")
    start = lowered.find(b"\r\ntransfer-encoding:")
    if start >= 0 and end >= 0:
        # h11 answers every coding but chunked with 501, before we see the head,
        # and a repeated header with 501 too; the codings of every line, in
        # order, are one list (RFC 9110 5.3), judged as llhttp's side judges it.
        values = []
        while start >= 0:
            line_end = head.find(b"\r\n", start + 2)
            values.append(head[start + 20 : line_end if line_end >= 0 else len(head)].strip())
            start = lowered.find(b"\r\ntransfer-encoding:", start + 2)
        refusal = transfer_coding_refusal(b", ".join(values).decode("latin-1"))
        if refusal is not None and refusal.status == 501:
            if length_at >= 0:
                # Both framings: refused as such (see _on_head), as llhttp
                # refuses them before it judges the coding.
                refusal = ParseError(400, "both Content-Length and Transfer-Encoding")
            return _malformed_but_coding(head) or refusal
        return refusal
    return None


def _line_ends_so_far_refusal(head: bytes | bytearray, pos: int) -> ParseError | None:
    """``_line_ends_refusal`` of a head still coming, of its bytes from
    ``pos`` on (what comes before them is judged; a CR or LF there is seen
    with the bytes before it), without a copy."""
    if _BARE_LF.search(head, pos) is not None:
        return ParseError(400, "a line in the request head does not end with CRLF")
    bare_cr = _BARE_CR.search(head, pos)
    if bare_cr is not None and bare_cr.start() != len(head) - 1:  # a CRLF cut in two
        return ParseError(400, "a bare CR in the request head")
    if _CONTROL.search(head, pos) is not None:
        return ParseError(400, "a control character in the request head")
    if _FOLDING.search(head, pos) is not None:
        return ParseError(400, "obsolete line folding in the request head")
    return None


_BARE_LF = re.compile(rb"(?<!\r)\n")
_BARE_CR = re.compile(rb"\r(?!\n)")
_FOLDING = re.compile(rb"\r\n[ \t]")


def _line_ends_refusal(head: bytes, whole: bool) -> ParseError | None:
    """Line ends, control characters and folding in (a part from a line's
    CRLF on of) a request head, ``whole`` or still coming."""
    crlf = head.count(b"\r\n")
    if head.count(b"\n") != crlf:
        return ParseError(400, "a line in the request head does not end with CRLF")
    if head.count(b"\r") != crlf + (not whole and head.endswith(b"\r")):  # a CRLF cut in two
        # A CR not ending a line: h11 would judge a transfer coding holding
        # one before the field's syntax (501 where llhttp answers 400).
        return ParseError(400, "a bare CR in the request head")
    if _CONTROL.search(head) is not None:
        # h11 takes control characters in field values (all but NUL, CR, LF);
        # RFC 9110 5.5 calls them invalid, and llhttp refuses them.
        return ParseError(400, "a control character in the request head")
    if b"\r\n " in head or b"\r\n\t" in head:
        return ParseError(400, "obsolete line folding in the request head")
    return None
