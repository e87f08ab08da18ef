"""Responses, and our own small serializer for them (used with both parsers).

The common answer is a status line, three or four fixed headers and a body of
known length; building those bytes directly costs far less than h11's generic
writer and is just as correct for that shape. Streams (SSE) and upgrades have
their own heads below.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, Final

Headers = tuple[tuple[bytes, bytes], ...]

JSON_TYPE = b"application/json"
SERVER_HEADER = b"server: syncd\r\n"


def _status_line(status: int) -> bytes:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    return f"HTTP/1.1 {status} {reason}\r\n".encode("ascii")


_STATUS_LINES: dict[int, bytes] = {s.value: _status_line(s.value) for s in HTTPStatus}
_OK_LINE: Final = _STATUS_LINES[200]

_date_second = 0
_date_header = b""


def date_header() -> bytes:
    """``date: ...\\r\\n``, rebuilt at most once a second."""
    global _date_second, _date_header
    now = int(time.time())
    if now != _date_second:
        _date_second = now
        _date_header = b"date: " + formatdate(now, usegmt=True).encode("ascii") + b"\r\n"
    return _date_header


class Response:
    __slots__ = ("body", "content_type", "headers", "status")

    def __init__(
        self,
        status: int = 200,
        body: bytes = b"",
        content_type: bytes | None = JSON_TYPE,
        headers: Headers = (),
    ) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = headers


# One encoder for every answer (json.dumps with options builds one per call).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(obj: Any) -> bytes:
    return _ENCODER.encode(obj).encode("utf-8")


def json_response(obj: Any, status: int = 200, headers: Headers = ()) -> Response:
    return Response(status, dumps(obj), JSON_TYPE, headers)


BEARER_CHALLENGE: Final = b"Bearer"
"""``WWW-Authenticate`` of a 401 that got no credentials (RFC 6750 3)."""
INVALID_TOKEN_CHALLENGE: Final = b'Bearer error="invalid_token"'
"""``WWW-Authenticate`` of a 401 whose credentials were refused: unparseable,
a bad signature, expired or revoked (RFC 6750 3.1)."""


def error_response(
    status: int,
    code: str,
    message: str,
    headers: Headers = (),
    extra: dict[str, Any] | None = None,
) -> Response:
    if status == 401:
        # RFC 9110 15.5.2: a 401 names the scheme it wants, for generic
        # clients and proxies (a browser shows no dialog for Bearer).
        challenge = BEARER_CHALLENGE if code == "missing_token" else INVALID_TOKEN_CHALLENGE
        headers = ((b"www-authenticate", challenge), *headers)
    body: dict[str, Any] = {"error": code, "message": message}
    if extra:
        body.update(extra)
    return Response(status, dumps(body), JSON_TYPE, headers)


def render(
    response: Response, keep_alive: bool, extra: Headers = (), head_only: bool = False
) -> bytes:
    """Serialize a fixed-length response."""
    status = response.status
    content_type = response.content_type
    if (
        status == 200
        and keep_alive
        and content_type is not None
        and not response.headers
        and not extra
        and not head_only
    ):
        # The usual answer (an op's), in one join: the same bytes as below.
        body = response.body
        return b"".join(
            (
                _OK_LINE,
                SERVER_HEADER,
                date_header(),
                b"content-type: ",
                content_type,
                b"\r\ncontent-length: ",
                b"%d" % len(body),
                b"\r\n\r\n",
                body,
            )
        )
    line = _STATUS_LINES.get(status) or _status_line(status)
    parts = [line, SERVER_HEADER, date_header()]
    if content_type is not None:
        parts += (b"content-type: ", content_type, b"\r\n")
    # 1xx, 204 and 304 carry no body and no content-length (RFC 9110 8.6).
    if status >= 200 and status not in (204, 304):
        parts += (b"content-length: ", str(len(response.body)).encode("ascii"), b"\r\n")
    for name, value in response.headers:
        parts += (name, b": ", value, b"\r\n")
    for name, value in extra:
        parts += (name, b": ", value, b"\r\n")
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    parts.append(b"\r\n")
    if not head_only and status >= 200 and status not in (204, 304):
        parts.append(response.body)
    return b"".join(parts)


def render_stream_head(status: int, content_type: bytes, headers: Headers = ()) -> bytes:
    """A head for a body that runs until the connection closes (SSE)."""
    parts = [
        _STATUS_LINES[status],
        SERVER_HEADER,
        date_header(),
        b"content-type: ",
        content_type,
        b"\r\n",
    ]
    for name, value in headers:
        parts += (name, b": ", value, b"\r\n")
    parts.append(b"connection: close\r\n\r\n")
    return b"".join(parts)


CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class StreamSink:
    """What a streaming handler may do with its connection: write, ask how far
    behind the peer is, close, and learn when the peer has gone."""

    __slots__ = ()  # so that a sink with slots of its own has no dict

    def write(self, data: bytes) -> None:
        raise NotImplementedError

    def buffered(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        """Drop the connection now, discarding unsent bytes (a peer too far behind)."""
        raise NotImplementedError

    def on_close(self, callback: Callable[[], None]) -> None:
        raise NotImplementedError

    def on_drain(self, callback: Callable[[], None]) -> None:
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        raise NotImplementedError


class StreamResponse:
    """A response whose body is written over time by ``start(sink)`` (SSE)."""

    __slots__ = ("abort", "content_type", "headers", "start", "status")

    def __init__(
        self,
        start: Callable[[StreamSink], None],
        content_type: bytes,
        headers: Headers = (),
        status: int = 200,
        abort: Callable[[], None] | None = None,
    ) -> None:
        self.start = start
        self.content_type = content_type
        self.headers = headers
        self.status = status
        self.abort = abort
        """Called instead of ``start`` when the peer left before the stream began."""


class Upgrade:
    """Switch the connection to another protocol (WebSocket).

    ``head`` is the 101 answer to write; ``attach(transport, trailing)`` returns
    the asyncio protocol that takes the transport over, given the bytes the
    HTTP parser had already read past the request.
    """

    __slots__ = ("attach", "head")

    def __init__(self, head: bytes, attach: Callable[[Any, bytes], Any]) -> None:
        self.head = head
        self.attach = attach


class Deferred:
    """An answer that comes once ``future`` is done: ``answer(future)`` makes
    it (or raises ``ApiError``). The connection waits with a done callback,
    not a task, so a handler whose only wait is one future (an op waiting for
    its group commit) costs no task and no coroutines. ``answer`` is called
    even when the peer has gone meanwhile: what it does besides answering
    (an op's fan-out) still happens."""

    __slots__ = ("answer", "future")

    def __init__(
        self, future: asyncio.Future[Any], answer: Callable[[asyncio.Future[Any]], Response]
    ) -> None:
        self.future = future
        self.answer = answer
