"""One small interface for HTTP/1.1 request parsing: bytes in, events out.

Theory of operation
-------------------
The connection feeds every received chunk to :meth:`HttpParser.feed` and then
pulls events with :meth:`HttpParser.next_event` until it gets ``NEED_DATA``.
Events are:

- a complete :class:`~syncd.http.request.Request` (head and whole body);
- ``CONTINUE``: the client sent ``Expect: 100-continue`` and waits for a
  ``100 Continue`` before sending the body (given at most once per request;
  :meth:`HttpParser.continue_head` is that request, its body not yet read);
- a :class:`ParseError` with the status to answer (400, 413, 431, 501, 505); the
  connection answers it and closes, since the byte stream can no longer be
  trusted (request smuggling starts where a parser guesses);
- ``CLOSED``: the peer closed its side.

After answering a request the connection calls :meth:`start_next_cycle`;
pipelined requests already received are then delivered in order. For an
upgrade, :meth:`trailing_data` returns the bytes received after the request,
which belong to the new protocol.

Two implementations sit behind this interface: h11 (the reference, always
installed) and httptools (llhttp, a C parser; the ``fast`` extra). ``syncd.http.parsers``
picks one; everything above the interface is unaware of which one runs. Both enforce the same limits.
"""

from __future__ import annotations

from typing import Final, Protocol

from syncd.http.request import Request

# A request head (its bytes from the request line's first to the blank
# line's last) longer than this is answered for its first MAX_HEAD_BYTES
# bytes: what is wrong in them, else 431 (see h11_parser.head_limit_refusal).
MAX_HEAD_BYTES: Final = 16 * 1024
# More header lines than any real client sends; bounds per-request work.
MAX_HEADERS: Final = 100

_SHORTEST_HEAD_PAST_FIELD_LIMIT: Final = len(b"A * HTTP/1.1\n") + (MAX_HEADERS + 1) * len(b"a:\n")
"""No head shorter than this has a field line past MAX_HEADERS: the common
head skips the count of its line ends."""


def field_limit_end(head: bytes | bytearray) -> int:
    """Where the first field line past MAX_HEADERS ends (after its LF) in
    ``head`` (from a request line on), if that line is whole before the
    head's blank line; -1 otherwise. Both parsers answer 431 once it is
    whole: after what llhttp refuses in the bytes before its LF as they
    arrive (a name that is no token, a control character, a Content-Length
    that is no number...), before what that line or any later one says (a
    second Host, an unknown coding) and whatever comes after it. So the
    answer is the same wherever the reads are cut."""
    if len(head) < _SHORTEST_HEAD_PAST_FIELD_LIMIT:
        return -1
    # Only the head's bytes are looked at, not what is held after it: the
    # requests pipelined behind it were scanned whole for each request before
    # them (512 KiB for each 39-byte GET held in the h11 side's buffer).
    blank = head.find(b"\n\r\n")
    # A bare LF's blank line (refused; still the head's end) only if earlier.
    bare_blank = head.find(b"\n\n", 0, len(head) if blank < 0 else blank)
    if blank < 0 or 0 <= bare_blank < blank:
        blank = bare_blank
    head_end = len(head) if blank < 0 else blank + 1
    if head.count(b"\n", 0, head_end) < MAX_HEADERS + 2:
        return -1
    end = -1
    for _ in range(MAX_HEADERS + 2):  # the request line's LF, then the fields'
        end = head.find(b"\n", end + 1, head_end)
        if end < 0:
            return -1
    return end + 1


class _Sentinel:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NEED_DATA: Final = _Sentinel("NEED_DATA")
CONTINUE: Final = _Sentinel("CONTINUE")
CLOSED: Final = _Sentinel("CLOSED")


class ParseError:
    __slots__ = ("headers", "message", "status")

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.message = message
        self.headers = headers
        """The refused request's header fields where its whole head was read
        and taken (a body over the limit: 413), so that the answer carries
        what an answer to that request would (CORS); None for a refusal of
        the head itself, whose fields are not to be trusted or not all read
        (the connection then reads its Origin alone: ``origin_in_head``)."""

    def __repr__(self) -> str:
        return f"ParseError({self.status}, {self.message!r})"


Event = Request | ParseError | _Sentinel


LIST_BLANKS: Final = " \t"
"""What surrounds a member of a field's list (RFC 9110 5.6.1: OWS, SP and
HTAB), as h11 and llhttp read it: not every character ``str.strip`` takes
for a space (latin-1 NEL and NBSP are field bytes like any other)."""


_VISIBLE_ASCII: Final = frozenset(range(0x21, 0x7F))


def origin_in_head(head: bytes) -> str | None:
    """The ``Origin`` of a refused request, read from the raw bytes of its
    head from its first byte on (across reads: the connection keeps them,
    ``protocol.HEAD_KEEP_BYTES``), where it can be read for certain:
    one whole field line named ``Origin`` (a name as sent, no space before
    its colon) whose value is visible ASCII, as every origin's serialization
    is (RFC 6454 6.2). None when there is none, two of them, or the line is
    cut or malformed: an answer carries no CORS header for a guess. Only the
    first MAX_HEAD_BYTES bytes, up to the head's blank line, are looked at.
    Run for a refusal only, never for a request that parses."""
    head = head[:MAX_HEAD_BYTES].lstrip(b"\r\n")  # empty lines before a request line
    ends = [i for i in (head.find(b"\n\r\n"), head.find(b"\n\n")) if i >= 0]
    if ends:
        head = head[: min(ends) + 1]
    lines = head.split(b"\n")[1:-1]  # past the request line; the last is cut (or empty)
    found: str | None = None
    count = 0
    for line in lines:
        name, colon, value = line.partition(b":")
        if colon and name.lower() == b"origin":
            count += 1
            value = value.rstrip(b"\r").strip(b" \t")
            if value and _VISIBLE_ASCII.issuperset(value):
                found = value.decode("ascii")
    return found if count == 1 else None


def body_too_large(limit: int) -> str:
    """The 413 message: the limit and the setting that raises it."""
    return f"request body larger than {limit} bytes (SERVICE_MAX_BODY_BYTES)"


def add_body(body: bytes | bytearray, data: bytes | bytearray) -> bytes | bytearray:
    """``body`` with ``data`` after it. A body comes in one piece (kept as it
    is) or many; the pieces go into one bytearray, not a list: a chunked body
    of 1-byte chunks held as a list of bytes objects cost some 90 bytes per
    byte (90 MB for a 1 MiB body), past what SERVICE_MAX_BODY_BYTES promises."""
    if not body:
        return bytes(data)
    if type(body) is bytes:
        body = bytearray(body)
    body += data
    return body


def body_bytes(body: bytes | bytearray) -> bytes:
    """The whole body as ``bytes`` (what ``add_body`` gathered)."""
    return body if type(body) is bytes else bytes(body)


class HttpParser(Protocol):
    name: str

    def feed(self, data: bytes) -> None:
        """Take received bytes; ``b""`` means the peer closed its side."""
        ...

    def next_event(self) -> Event: ...

    def start_next_cycle(self) -> None:
        """The current request has been answered; move on to the next."""
        ...

    def continue_head(self) -> Request:
        """The request whose ``CONTINUE`` was the last event (its head; the
        body may not have come): what the connection routes before the 100."""
        ...

    def in_progress(self) -> bool:
        """True while part of a request (not yet complete) has been received."""
        ...

    def buffered(self) -> int:
        """Bytes received but not yet turned into events (pipelining backlog)."""
        ...

    def trailing_data(self) -> bytes:
        """Bytes received after the current request (for an upgrade hand-off)."""
        ...


# The request methods llhttp knows: the methods syncd recognises. Anything
# else (a lower-case ``get`` too: methods are case-sensitive) is answered 501
# by both parsers alike (``method_refusal``); h11 would accept any token and
# let the router answer 404/405, llhttp refuses it while parsing.
KNOWN_METHODS: Final = frozenset(
    [
        "DELETE",
        "GET",
        "HEAD",
        "POST",
        "PUT",
        "CONNECT",
        "OPTIONS",
        "TRACE",
        "COPY",
        "LOCK",
        "MKCOL",
        "MOVE",
        "PROPFIND",
        "PROPPATCH",
        "SEARCH",
        "UNLOCK",
        "BIND",
        "REBIND",
        "UNBIND",
        "ACL",
        "REPORT",
        "MKACTIVITY",
        "CHECKOUT",
        "MERGE",
        "M-SEARCH",
        "NOTIFY",
        "SUBSCRIBE",
        "UNSUBSCRIBE",
        "PATCH",
        "PURGE",
        "MKCALENDAR",
        "LINK",
        "UNLINK",
        "SOURCE",
        "QUERY",
    ]
)


def method_refusal(method: str) -> ParseError:
    """RFC 9110 9.1 and 15.6.2: a method the server does not recognise is 501
    Not Implemented, not a malformed request (it was well-formed)."""
    hint = " (methods are case-sensitive)" if method.upper() in KNOWN_METHODS else ""
    return ParseError(501, f"method {method} is not implemented{hint}")


def version_refusal(version: str) -> ParseError | None:
    """Only HTTP/1.0 and 1.1: 505 for a later major version, 400 for anything else."""
    if version in ("1.0", "1.1"):
        return None
    if version[:1].isdigit() and version[:1] >= "2":
        return ParseError(505, f"HTTP/{version} is not supported")
    return ParseError(400, f"HTTP/{version} is not supported")


def transfer_coding_refusal(value: str) -> ParseError | None:
    """We decode only ``chunked``; RFC 9112 6.1 asks 501 for codings we do not know."""
    codings = [c.strip(LIST_BLANKS).lower() for c in value.split(",")]
    if codings == ["chunked"]:
        return None
    if "" in codings:
        # An empty list or an empty member is malformed, not an unknown coding
        # (llhttp refuses an empty value itself, with 400).
        return ParseError(400, "an empty transfer coding")
    if "chunked" in codings[:-1]:
        # RFC 9112 6.1: chunked must be the last coding, else the length is unknowable.
        return ParseError(400, "chunked is not the last transfer coding")
    return ParseError(501, f"transfer coding {value!r} is not supported")


def trailer_closes(name: bytes, value: bytes) -> bool:
    """Whether a trailer field is a Connection list holding ``close`` (in any
    case): the one trailer field either parser acts on, since llhttp closes
    the connection for it and both parsers must answer alike (RFC 9110 6.5.1
    has every other trailer dropped)."""
    return name.lower() == b"connection" and b"close" in (
        token.strip() for token in value.lower().split(b",")
    )


def keep_alive_of(http_version: str, connection: str) -> bool:
    """RFC 9112 9.3: persistent by default in 1.1, opt-in with keep-alive in 1.0."""
    if not connection:  # most requests
        return http_version == "1.1"
    tokens = {t.strip(LIST_BLANKS).lower() for t in connection.split(",")}
    if "close" in tokens:
        return False
    if http_version == "1.1":
        return True
    return "keep-alive" in tokens


def split_target(target: str) -> tuple[str, str]:
    path, _, query = target.partition("?")
    return path, query


def _origin_form(target: str) -> str:
    """An absolute-form target's path and query (RFC 9112 3.2.2: a server MUST
    accept the form, as a proxy sends it): ``http://host:80/a?b`` is ``/a?b``."""
    rest = target.partition("://")[2]
    cuts = [i for i in (rest.find("/"), rest.find("?")) if i >= 0]
    rest = rest[min(cuts) :] if cuts else ""
    return rest if rest.startswith("/") else "/" + rest


def request_from_head(method: str, target: str, headers: dict[str, str], version: str) -> Request:
    """The Request both parsers build once a head has passed their checks."""
    # split_target and keep_alive_of's usual case (no Connection header),
    # inline: this runs once per request.
    if target[:1] != "/" and "://" in target:
        target = _origin_form(target)
    path, _, query = target.partition("?")
    connection = headers.get("connection")
    keep_alive = keep_alive_of(version, connection) if connection else version == "1.1"
    return Request(method, path, query, headers, b"", version, keep_alive)
