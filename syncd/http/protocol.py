"""The HTTP/1.1 connection: parser events in, handler calls, responses out.

Theory of operation
-------------------
One :class:`HttpProtocol` per TCP connection. Received bytes go to the parser
(h11 or httptools, behind :mod:`syncd.http.parser`); each complete request is
routed and its handler called. A handler answers with a :class:`Response`
(sent at once), an awaitable of one (run as a task; the connection handles one
request at a time, so pipelined requests wait in the parser and are answered in
order), a :class:`StreamResponse` (SSE: the connection becomes the stream's
sink until either side closes), or an :class:`Upgrade` (WebSocket: the
transport is handed to another protocol with the bytes already read). A
stream's connection reads no more requests, so it lets its parser go (with
the request it holds) when the stream starts: an open SSE stream keeps only
what streaming needs.

Timers: one timer per connection with a moving deadline. While waiting for a
request, the deadline is the keep-alive timeout; from the first byte of a
request it is the header timeout, counted once from that byte (a client that
trickles bytes does not extend it: the slowloris defence); while a handler
runs, and while a stream is open, there is none. While the peer does not read what we owe it (writing is
paused), the deadline is the send timeout, and past it the connection is
aborted; a closing connection whose answer is still unsent gets the same bound.

Closing: an answer carries ``Connection: close`` when the client asked for it,
after a parse error, and from the first stop signal on
(``ServerContext.draining``: one attribute check per answer). It is followed
by a half-close, not a close. The peer may still be sending (the rest of a
body refused with 413, pipelined requests), and closing a socket with unread
input sends a RST that can make the peer's stack throw our answer away before
its client reads it. So we send FIN, discard what still arrives, and close at
the peer's EOF, once it has sent nothing for ``LINGER_IDLE_S``, or
``LINGER_TOTAL_S`` after the answer whatever it sends (nginx's lingering
close). The bounds are on time, not bytes: a client uploading a body far over
the limit must be able to send all of it and then read its 413.

Refusals carry CORS headers (``extra_headers``) for an allowed Origin as other
answers do, so a browser page reads them: a parse refusal's from the refused
request's raw head bytes, kept by reference from a request boundary across
reads (``HEAD_KEEP_BYTES``; a pipelined one is found behind the requests
before it); a 503 at accept from the head it waits for briefly, within the
bounds of the refused connections' linger (``REFUSED_HEAD_WAIT_S``).

Backpressure: when the transport's write buffer passes its high-water mark,
reading pauses until it drains (not a stream's: its EOF must end it, and
what else it sends is discarded); ``connection_lost`` wakes every writer waiting
for drain. While a request is in flight and the pipelined backlog is over
``MAX_PIPELINE_BYTES`` reading pauses too, so a client cannot queue unbounded
work.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, cast

from syncd.errors import ApiError
from syncd.http.connstate import (
    BUSY,
    CLOSED,
    IDLE,
    LINGERING,
    STREAMING,
    UPGRADED,
    ConnectionState,
    Phase,
)
from syncd.http.parser import CLOSED as PEER_CLOSED
from syncd.http.parser import (
    CONTINUE,
    MAX_HEAD_BYTES,
    NEED_DATA,
    HttpParser,
    ParseError,
    origin_in_head,
)
from syncd.http.parsers import make_parser
from syncd.http.request import Request
from syncd.http.response import (
    CONTINUE as CONTINUE_BYTES,
)
from syncd.http.response import (
    Deferred,
    Headers,
    Response,
    StreamResponse,
    StreamSink,
    Upgrade,
    error_response,
    render,
    render_stream_head,
)
from syncd.proxies import Network, client_address

if TYPE_CHECKING:
    from syncd.http.router import Router

log = logging.getLogger("syncd.http")

# Pipelined bytes we hold while a request is in flight before we stop reading.
MAX_PIPELINE_BYTES: Final = 256 * 1024
# Transport write-buffer marks: past HIGH we pause reading until below LOW.
WRITE_HIGH_WATER: Final = 256 * 1024
WRITE_LOW_WATER: Final = 64 * 1024
# Lingering close: how long we keep reading (and discarding) after our last
# answer, waiting for the peer's EOF. Bounded by time, as nginx bounds it, and
# not by a byte count: a client that sends a 20 MB body against a 1 MiB limit
# sends all of it before it reads our 413, and a close with its bytes still
# arriving would reset the connection, which can destroy the 413 in the
# client's receive buffer. Discarded bytes are never kept, so a lingering
# connection costs a socket and a timer, for at most LINGER_TOTAL_S.
# Quiet this long (nginx's lingering_timeout): a client that read its answer
# and neither closes nor sends; also what a stalled uploader gets.
LINGER_IDLE_S: Final = 5.0
# From the answer on, whatever the peer sends (nginx's lingering_time): a peer
# that never stops sending is cut off here. Room for an upload of a few
# hundred megabytes on a fast link to finish, which no client needs to send.
LINGER_TOTAL_S: Final = 30.0
# A connection refused with 503 (over SERVICE_MAX_CONNECTIONS, or shutting
# down) lingers too, so its client reads the 503 instead of a reset, but more
# briefly, and only so many at once: past this many, a flood over the cap is
# closed at once rather than held.
REFUSED_LINGER_S: Final = 0.5
MAX_REFUSED_LINGERING: Final = 64
# With a CORS policy, a refused connection's 503 waits for the head of the
# request it came to send (its Origin), for at most this long and this many
# bytes: a browser sends its request at once after connecting, and puts Origin
# before the Cookie field that makes its heads long. The wait counts against
# MAX_REFUSED_LINGERING, so under a flood it costs no more than the linger:
# past that many, the 503 goes out at once (with Vary: Origin alone).
REFUSED_HEAD_WAIT_S: Final = 0.25
REFUSED_HEAD_BYTES: Final = 8 * 1024
# The reads kept from a request boundary on (by reference, not copied), where
# a parse refusal's answer looks for the refused request's Origin: its head's
# first MAX_HEAD_BYTES (all origin_in_head reads) behind as many bytes of the
# pipelined requests before it. Past it, the Origin is not looked for: an
# answer carries no CORS header for a guess (browsers, the clients CORS is
# for, do not pipeline).
HEAD_KEEP_BYTES: Final = 2 * MAX_HEAD_BYTES


class ServerContext:
    """What every connection shares: the router, limits, the live connection set."""

    def __init__(
        self,
        router: Router,
        *,
        parser_name: str,
        max_body: int,
        header_timeout: float,
        keepalive_timeout: float,
        max_connections: int,
        send_timeout: float,
        extra_headers: Callable[[Request], Headers] | None = None,
        on_response: Callable[[int], None] | None = None,
        on_request: Callable[[Request, int, float], None] | None = None,
        trusted_proxies: tuple[Network, ...] = (),
    ) -> None:
        self.router = router
        self.parser_name = parser_name
        self.max_body = max_body
        self.header_timeout = header_timeout
        self.keepalive_timeout = keepalive_timeout
        self.send_timeout = send_timeout
        self.max_connections = max_connections
        self.extra_headers = extra_headers
        self.on_response = on_response
        self.on_request = on_request
        """Called once per answered request with its status and the seconds
        since it was read (the latency histogram, the access log); not for
        what never became a request (a malformed one, a refused connection)."""
        self.trusted_proxies = trusted_proxies
        """Peers whose forwarding headers name the client (SERVICE_TRUSTED_PROXIES)."""
        self.connections: set[HttpProtocol] = set()
        self.refused_lingering = 0
        """Connections answered 503 at accept and lingering (MAX_REFUSED_LINGERING)."""
        self.other_connections: set[Any] = set()
        """Upgraded (WebSocket) connections, counted against max_connections."""
        self.draining = False
        """From the first stop signal on (the drain, then the shutdown): every
        answer carries ``Connection: close`` and its connection closes after
        it, so keep-alive clients reconnect elsewhere one by one during the
        drain rather than all at once when the listener closes (Envoy's and
        nginx's drain). Streams and WebSockets are left as they are."""
        self.closing = False
        """The shutdown proper: new connections and upgrades are refused."""

    @property
    def connection_count(self) -> int:
        return len(self.connections) + len(self.other_connections)


class HttpProtocol(asyncio.Protocol):
    # One per open connection (an SSE stream's for its whole life): slots keep it small.
    __slots__ = (
        "_ctx",
        "_deadline",
        "_drain_waiters",
        "_head_kept",
        "_head_read",
        "_head_skip",
        "_linger_budget",
        "_linger_end",
        "_linger_idle",
        "_loop",
        "_parser",
        "_peer",
        "_peer_eof",
        "_processing",
        "_read_paused",
        "_refused",
        "_refusing",
        "_state",
        "_stream",
        "_task",
        "_timer",
        "_tls",
        "_transport",
        "_unsent_mark",
        "_write_paused",
    )

    def __init__(self, ctx: ServerContext, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._ctx = ctx
        self._loop = loop or asyncio.get_event_loop()
        self._parser: HttpParser | None = make_parser(ctx.parser_name, ctx.max_body)
        """None once a stream has started: nothing more is parsed."""
        self._transport: asyncio.Transport | None = None
        self._peer = ""
        self._tls = False
        self._state = ConnectionState()
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deadline: float | None = None
        self._read_paused = False
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] | None = None
        """Handlers waiting for the peer to read (None: none ever has)."""
        self._stream: _Sink | None = None
        self._processing = False
        self._peer_eof = False
        self._linger_budget = 0
        """Bytes a refused connection may still discard (-1: no byte bound)."""
        self._linger_end = 0.0
        """When lingering ends whatever the peer sends (the loop's clock)."""
        self._linger_idle = 0.0
        """How long lingering waits for the peer's next bytes or its EOF."""
        self._unsent_mark = 0
        self._refused = False
        self._head_read: bytes | list[bytes] = b""
        """The reads since the last request boundary (the first byte of a
        read the parser held nothing before): one read, or a list of them
        once more came (``_keep_read``, up to HEAD_KEEP_BYTES); empty when
        nothing is in progress or where a request starts is no longer known.
        Where a parse refusal's answer finds the refused request's Origin
        (CORS: ``_refused_head``). References, never copies."""
        self._head_skip = 0
        """Requests dispatched from ``_head_read``'s bytes: the refused one
        begins after them."""
        self._head_kept = 0
        """Bytes in ``_head_read`` once it is a list."""
        self._refusing: bytes | None = None
        """A connection refused at accept whose 503 waits for its head (the
        bytes so far): ``REFUSED_HEAD_WAIT_S``; None otherwise."""

    # -- asyncio.Protocol ------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it.
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        # (host, port) for IPv4 and IPv6; a Unix socket's peer name is a string.
        self._peer = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        # TLS cannot half-close: after the peer's EOF the transport closes.
        self._tls = transport.get_extra_info("sslcontext") is not None
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=WRITE_LOW_WATER)
        ctx = self._ctx
        if ctx.closing or ctx.connection_count >= ctx.max_connections:
            self._parser = None  # nothing it sends is parsed
            if ctx.extra_headers is not None and ctx.refused_lingering < MAX_REFUSED_LINGERING:
                # Its Origin first, so that a page on an allowed origin can
                # read the 503 (CORS): see REFUSED_HEAD_WAIT_S.
                ctx.refused_lingering += 1
                self._refused = True
                self._refusing = b""
                self._timer = self._loop.call_later(REFUSED_HEAD_WAIT_S, self._answer_refused)
                return
            self._answer_refused()
            return
        ctx.connections.add(self)
        self._set_deadline(self._ctx.header_timeout)

    def data_received(self, data: bytes) -> None:
        if self._state.phase is LINGERING:
            # Discarded as it comes; what arrives only moves the idle deadline
            # (never past the total one, nor while the send timeout runs).
            if self._linger_budget >= 0:
                self._linger_budget -= len(data)
                if self._linger_budget < 0:
                    self._abort()
                    return
            if not self._write_paused:
                self._deadline = min(self._loop.time() + self._linger_idle, self._linger_end)
            return
        parser = self._parser
        if parser is None or self._stream is not None:
            if self._refusing is not None:
                self._read_refused(data)
            return  # a stream's client has nothing more to say; ignore it
        if self._state.phase is IDLE and not parser.in_progress():
            if not self._write_paused:
                # First byte of a new request: the header deadline starts now, once.
                # (_set_deadline and _arm's usual case, inline: once per request.)
                deadline = self._deadline = self._loop.time() + self._ctx.header_timeout
                timer = self._timer
                if timer is None or timer.when() > deadline:
                    self._arm(deadline)
            self._head_read = data  # a reference, no copy; dropped once nothing is in progress
            self._head_skip = 0
        elif self._head_read:
            self._keep_read(data)
        parser.feed(data)
        if self._state.phase is IDLE:
            self._process()
        elif parser.buffered() > MAX_PIPELINE_BYTES:
            self._pause_reading()

    def eof_received(self) -> bool | None:
        self._peer_eof = True
        parser = self._parser
        if self._refusing is not None:
            self._answer_refused()  # with what came of its head; then closed
            return None
        if self._state.phase is STREAMING or self._state.phase is LINGERING or parser is None:
            self._close()
            return None
        parser.feed(b"")
        if self._state.phase is IDLE:
            self._process()
        # Keep our side open until our answer is written (plain TCP only).
        return None if self._tls else True

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            self._refused = False
            self._ctx.refused_lingering -= 1
        if not self._state.done:
            self._state.to(CLOSED)
        self._ctx.connections.discard(self)
        self._cancel_timer()
        self._wake_drain_waiters()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._stream is not None:
            self._stream.lost()

    def pause_writing(self) -> None:
        self._write_paused = True
        if self._stream is None:
            # A stream's connection reads on: what comes is discarded, and its
            # EOF ends the stream, even with a backlog the peer will not read.
            self._pause_reading()
        if not self._closed and self._transport is not None:
            self._unsent_mark = self._transport.get_write_buffer_size()
            self._arm(self._loop.time() + self._ctx.send_timeout)

    def resume_writing(self) -> None:
        self._write_paused = False
        self._cancel_timer()  # the send deadline; _process() sets the next one
        if self._state.phase is LINGERING:
            # Our answer is (nearly) out only now: the peer gets at least one
            # quiet spell to read it, even past the total bound.
            now = self._loop.time()
            self._linger_end = max(self._linger_end, now + self._linger_idle)
            self._arm(min(now + self._linger_idle, self._linger_end))
        self._wake_drain_waiters()
        if self._state.phase is not BUSY:
            self._resume_reading()
            if self._stream is None:
                self._process()  # the rest of a pipeline held back while paused
        if self._stream is not None:
            self._stream.drained()

    # -- request cycle ---------------------------------------------------

    def _process(self) -> None:
        """Handle every complete request we can, in order, until one goes async
        or the peer stops reading our answers.

        One loop at a time: a handler that answers at once calls back in here
        through ``_send``; that call returns and this loop carries on, instead
        of recursing once per pipelined request (RecursionError at ~330).
        """
        if self._processing:
            return
        self._processing = True
        try:
            parser = self._parser
            state = self._state
            while state.phase is IDLE and parser is not None:
                if self._write_paused:
                    # Answering more of a pipeline the peer does not read would
                    # buffer without bound (a small GET can ask for a large
                    # state); resume_writing() carries on once it drains.
                    return
                event = parser.next_event()
                if event is NEED_DATA:
                    if parser.in_progress():
                        self._set_deadline_once(self._ctx.header_timeout)
                    else:
                        self._head_read = b""  # the next read starts a request
                        # _set_deadline (writing is not paused here) and _arm's
                        # usual case, inline: once per request.
                        deadline = self._deadline = self._loop.time() + self._ctx.keepalive_timeout
                        timer = self._timer
                        if timer is None or timer.when() > deadline:
                            self._arm(deadline)
                    return
                if event is CONTINUE:
                    if self._continue_refused(parser.continue_head()):
                        return
                    self._write(CONTINUE_BYTES)
                    continue
                if event is PEER_CLOSED:
                    self._close()
                    return
                if isinstance(event, ParseError):
                    self._send(
                        error_response(
                            event.status,
                            _PARSE_CODES.get(event.status, "bad_request"),
                            event.message,
                            self._refusal_headers(event),
                        ),
                        None,
                        keep_alive=False,
                    )
                    return
                assert isinstance(event, Request)
                self._deadline = None
                self._dispatch(event)
        finally:
            self._processing = False

    def _continue_refused(self, head: Request) -> bool:
        """Before a 100 Continue: a request no route takes (404, 405), or
        that its route's guard refuses (a missing or bad token: 401, no
        permission: 403; see syncd.http.handlers.guards), is answered now,
        so its client does not upload a body for nothing, and the connection
        closes after it (RFC 9110 10.1.1: what body comes anyway is read and
        discarded while it lingers)."""
        try:
            route, params = self._ctx.router.match_route(head.method, head.path)
            guard = route.guard
            if guard is not None:
                head.route = route.kind
                head.params = params
                guard(head)
        except Exception as exc:
            head.started = time.perf_counter()
            trusted = self._ctx.trusted_proxies
            head.client = (
                client_address(self._peer, head.headers, trusted) if trusted else self._peer
            )
            self._send(_failure_response(exc, head), head, keep_alive=False)
            return True
        return False

    def _refusal_headers(self, refusal: ParseError) -> Headers:
        """What an answer to the refused request would carry besides (CORS:
        a page on an allowed origin reads its 400, 413, 431, 501 or 505
        instead of a network error): from its fields where the parser read
        and took its whole head, else from the Origin that can be read in
        its raw bytes (``origin_in_head`` of ``_refused_head``)."""
        if self._ctx.extra_headers is None:
            return ()
        if refusal.headers is not None:
            return self._cors_headers(refusal.headers)
        head = self._refused_head()
        origin = origin_in_head(head) if head else None
        return self._cors_headers({} if origin is None else {"origin": origin})

    def _cors_headers(self, fields: dict[str, str]) -> Headers:
        """What ``extra_headers`` gives a request of ``fields`` alone (all it
        reads of one); nothing without a CORS policy."""
        extra_headers = self._ctx.extra_headers
        if extra_headers is None:
            return ()
        return extra_headers(Request("", "", "", fields, b"", "1.1", False))

    def _keep_read(self, data: bytes) -> None:
        """A read after the one a request boundary began: kept behind it
        while what is kept is under HEAD_KEEP_BYTES; past that, nothing is
        (where a later request starts is no longer known)."""
        kept = self._head_read
        if isinstance(kept, bytes):
            self._head_kept = len(kept)
            kept = self._head_read = [kept]
        if self._head_kept >= HEAD_KEEP_BYTES:
            self._head_read = b""
            return
        kept.append(data)
        self._head_kept += len(data)

    def _refused_head(self) -> bytes:
        """The raw bytes of the request the parser refused, from its first
        byte on (across reads; its first MAX_HEAD_BYTES are all that is read
        of them), or b"" where they are not known. Only on the way to a
        refusal's answer."""
        kept = self._head_read
        data = kept if isinstance(kept, bytes) else b"".join(kept)
        if not data or not self._head_skip:
            return data
        start = _request_start(data, self._head_skip, self._ctx.max_body)
        return b"" if start is None else data[start:]

    def _read_refused(self, data: bytes) -> None:
        """What a connection refused at accept sends while its 503 waits: its
        head, up to REFUSED_HEAD_BYTES; the answer goes once the head is whole
        (or the bytes so far are that many)."""
        before = self._refusing
        assert before is not None
        head = (before + data)[:REFUSED_HEAD_BYTES]
        self._refusing = head
        since = max(0, len(before) - 2)  # a blank line may straddle the reads
        if (
            len(head) >= REFUSED_HEAD_BYTES
            or head.find(b"\n\r\n", since) >= 0
            or head.find(b"\n\n", since) >= 0
        ):
            self._answer_refused()

    def _answer_refused(self) -> None:
        """The 503 of a connection refused at accept (over SERVICE_MAX_CONNECTIONS,
        or shutting down), with CORS headers for the Origin its head names
        where one was waited for; then a brief linger (``_refuse``)."""
        ctx = self._ctx
        head = self._refusing
        self._refusing = None
        self._cancel_timer()
        if self._transport is None or self._closed:
            return
        headers: Headers = ()
        if ctx.extra_headers is not None:
            origin = origin_in_head(head) if head else None
            headers = self._cors_headers({} if origin is None else {"origin": origin})
        reason = "server is shutting down" if ctx.closing else "too many connections"
        response = error_response(503, "unavailable", reason, headers)
        self._write(render(response, keep_alive=False))
        if ctx.on_response is not None:
            ctx.on_response(503)
        self._refuse()

    def _dispatch(self, request: Request) -> None:
        self._head_skip += 1
        self._state.to(BUSY)
        request.started = time.perf_counter()
        trusted = self._ctx.trusted_proxies
        request.client = (
            client_address(self._peer, request.headers, trusted) if trusted else self._peer
        )
        try:
            route, params = self._ctx.router.match_route(request.method, request.path)
            request.route = route.kind
            request.params = params
            result = route.handler(request)
        except Exception as exc:
            self._send(_failure_response(exc, request), request)
            return
        if isinstance(result, Response):
            self._send(result, request)
        elif isinstance(result, Deferred):
            self._defer(result, request)
        elif isinstance(result, StreamResponse):
            self._start_stream(result, request)
        elif isinstance(result, Upgrade):
            self._upgrade(result, request)
        else:
            self._task = self._loop.create_task(self._finish(result, request))

    def _defer(self, deferred: Deferred, request: Request) -> None:
        """Answer once ``deferred``'s future is done (see Deferred)."""

        def settled(future: asyncio.Future[Any]) -> None:
            try:
                response = deferred.answer(future)
            except asyncio.CancelledError:
                return
            except Exception as exc:
                response = _failure_response(exc, request)
            if not self._closed:
                self._send(response, request)

        deferred.future.add_done_callback(settled)

    async def _finish(self, pending: Awaitable[Any], request: Request) -> None:
        try:
            result = await pending
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            result = _failure_response(exc, request)
        if self._closed:
            if isinstance(result, StreamResponse) and result.abort is not None:
                result.abort()
            return
        if isinstance(result, StreamResponse):
            self._start_stream(result, request)
        elif isinstance(result, Upgrade):
            self._upgrade(result, request)
        else:
            self._send(result, request)

    def _send(
        self, response: Response, request: Request | None, keep_alive: bool | None = None
    ) -> None:
        ctx = self._ctx
        if keep_alive is None:
            keep_alive = request is not None and request.keep_alive and not ctx.draining
        extra: Headers = ()
        if request is not None and ctx.extra_headers is not None:
            extra = ctx.extra_headers(request)
        if keep_alive and request is not None and request.http_version != "1.1":
            # A 1.0 client keeps the connection only if the answer says so
            # (RFC 9112 appendix C.2.2); a 1.1 one does unless told otherwise.
            extra += _KEEP_ALIVE
        head_only = request is not None and request.method == "HEAD"
        transport = self._transport
        if transport is not None and not transport.is_closing():  # _write, inline
            transport.write(render(response, keep_alive, extra, head_only))
        if ctx.on_response is not None:
            ctx.on_response(response.status)
        if request is not None and ctx.on_request is not None:
            ctx.on_request(request, response.status, time.perf_counter() - request.started)
        self._task = None
        if not keep_alive:
            self._close_after_answer(LINGER_IDLE_S, LINGER_TOTAL_S)
            return
        state = self._state
        if state.phase is BUSY:
            state.to(IDLE)
        parser = self._parser
        if parser is not None:
            parser.start_next_cycle()
        if self._read_paused and not self._write_paused:
            self._resume_reading()
        # The keep-alive (or next header) deadline is set there, once it finds
        # no complete request waiting; a pipelined one has none.
        self._process()

    def _start_stream(self, response: StreamResponse, request: Request) -> None:
        extra = self._ctx.extra_headers(request) if self._ctx.extra_headers is not None else ()
        self._write(
            render_stream_head(response.status, response.content_type, response.headers + extra)
        )
        ctx = self._ctx
        if ctx.on_response is not None:
            ctx.on_response(response.status)
        if ctx.on_request is not None:
            ctx.on_request(request, response.status, time.perf_counter() - request.started)
        self._task = None
        if request.method == "HEAD" or self._peer_eof:
            # The head GET would get, and no body: the stream is its body, and
            # its events would be read as the next answer. It never starts.
            # Nor after the client's EOF: it ends a stream (eof_received), and
            # one that came while the stream was being prepared ends it too.
            if response.abort is not None:
                response.abort()
            self._close_after_answer(LINGER_IDLE_S, LINGER_TOTAL_S)
            return
        self._cancel_timer()  # no deadline while streaming (see the module docstring)
        self._parser = None  # and its last request: nothing more is read
        self._head_read = b""  # nor refused
        sink = _Sink(self)
        self._stream = sink
        self._state.to(STREAMING)
        try:
            response.start(sink)
        except Exception:
            log.exception("stream start failed for %s", request.path)
            self._close()

    def _upgrade(self, upgrade: Upgrade, request: Request) -> None:
        transport = self._transport
        if transport is None or self._closed:
            return
        refusal = _upgrade_refusal(request)
        if refusal is not None:
            # Closed after: with llhttp, a refused body is still unparsed input.
            self._send(error_response(400, "bad_request", refusal), request, keep_alive=False)
            return
        self._write(upgrade.head)
        ctx = self._ctx
        if ctx.on_response is not None:
            ctx.on_response(101)
        if ctx.on_request is not None:
            ctx.on_request(request, 101, time.perf_counter() - request.started)
        trailing = self._parser.trailing_data() if self._parser is not None else b""
        self._head_read = b""
        self._state.to(UPGRADED)
        self._cancel_timer()
        self._ctx.connections.discard(self)
        protocol = upgrade.attach(transport, trailing)
        transport.set_protocol(protocol)
        if self._read_paused:
            transport.resume_reading()

    # -- plumbing ----------------------------------------------------------

    def _write(self, data: bytes) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    async def drain(self) -> None:
        """Wait until the write buffer is below its low-water mark (or the peer left)."""
        if not self._write_paused or self._closed:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        if self._drain_waiters is None:
            self._drain_waiters = []
        self._drain_waiters.append(waiter)
        await waiter

    def _wake_drain_waiters(self) -> None:
        waiters = self._drain_waiters
        if waiters:
            self._drain_waiters = None
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def _close(self) -> None:
        transport = self._transport
        if self._state.phase is UPGRADED:
            return  # the transport is another protocol's now
        if self._state.phase is not CLOSED:
            self._state.to(CLOSED)
        self._cancel_timer()
        if transport is not None and not transport.is_closing():
            transport.close()
            if transport.get_write_buffer_size() > 0:
                # close() waits for the buffer to go out; a peer that never
                # reads would hold the socket for ever.
                self._timer = self._loop.call_later(self._ctx.send_timeout, transport.abort)
        if self._stream is not None:
            # Nothing it writes goes out any more: over now, not once what is
            # unsent has gone (a peer that sent its EOF may never read it).
            self._stream.lost()

    def _abort(self) -> None:
        if self._state.phase is UPGRADED:
            return
        if self._state.phase is not CLOSED:
            self._state.to(CLOSED)
        self._cancel_timer()
        if self._transport is not None:
            self._transport.abort()

    def _close_after_answer(self, idle: float, total: float, budget: int = -1) -> None:
        """Half-close and linger (see the module docstring) until the peer is
        quiet for ``idle`` seconds, ``total`` seconds have passed, or (when not
        -1) past ``budget`` discarded bytes; or close at once when the peer has
        said all it will."""
        transport = self._transport
        if (
            transport is None
            or self._closed
            or self._peer_eof
            or transport.is_closing()
            or not transport.can_write_eof()
        ):
            self._close()
            return
        transport.write_eof()
        self._state.to(LINGERING)
        self._linger_budget = budget
        self._linger_idle = idle
        self._linger_end = self._loop.time() + total
        self._resume_reading()
        if not self._write_paused:
            self._arm(min(self._loop.time() + idle, self._linger_end))

    def _refuse(self) -> None:
        """After the 503 of a refused connection: linger briefly, within bounds
        (one that waited for its head holds its place among them already)."""
        ctx = self._ctx
        if not self._refused and ctx.refused_lingering >= MAX_REFUSED_LINGERING:
            self._close()
            return
        # A request or two, not a body upload: over the cap, shed it fast.
        self._close_after_answer(REFUSED_LINGER_S, REFUSED_LINGER_S, WRITE_LOW_WATER)
        if self._state.phase is LINGERING and not self._refused:
            ctx.refused_lingering += 1
            self._refused = True

    def shutdown(self) -> None:
        """Graceful stop: idle connections close now, busy ones after their answer."""
        if self._stream is not None:
            self._stream.close()
        elif self._state.phase is not BUSY:
            self._close()

    @property
    def busy(self) -> bool:
        return self._state.phase is BUSY

    @property
    def phase(self) -> Phase:
        return self._state.phase

    @property
    def _closed(self) -> bool:
        return self._state.done

    def _pause_reading(self) -> None:
        if not self._read_paused and self._transport is not None and not self._closed:
            self._read_paused = True
            self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._read_paused and self._transport is not None and not self._closed:
            self._read_paused = False
            self._transport.resume_reading()

    def _set_deadline(self, timeout: float) -> None:
        if not self._write_paused:  # the send timeout runs until resume_writing()
            self._arm(self._loop.time() + timeout)

    def _set_deadline_once(self, timeout: float) -> None:
        if self._deadline is None and not self._write_paused:
            self._arm(self._loop.time() + timeout)

    def _arm(self, deadline: float) -> None:
        self._deadline = deadline
        timer = self._timer
        if timer is not None and timer.when() <= deadline:
            return  # it fires first and re-arms itself for the later deadline
        if timer is not None:
            timer.cancel()
        self._timer = self._loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        deadline = self._deadline
        if deadline is None or self._closed:
            return
        if self._loop.time() < deadline:
            self._timer = self._loop.call_at(deadline, self._on_timer)
        elif self._write_paused:
            # Like nginx's send_timeout: the bound is on a stall, not on the
            # whole transfer, so a slow but steady reader keeps its answer.
            unsent = self._transport.get_write_buffer_size() if self._transport else 0
            if unsent < self._unsent_mark:
                self._unsent_mark = unsent
                self._arm(self._loop.time() + self._ctx.send_timeout)
                return
            self._abort()  # not one byte went out in send_timeout
            if self._stream is not None:
                self._stream.lost()
        elif self._state.phase is LINGERING or self._state.phase is IDLE:
            self._close()  # linger over, or idle past keep-alive / header timeout

    def _cancel_timer(self) -> None:
        self._deadline = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


_KEEP_ALIVE: Final[Headers] = ((b"connection", b"keep-alive"),)

_PARSE_CODES = {
    413: "payload_too_large",
    431: "bad_request",
    400: "bad_request",
    505: "bad_request",
    501: "not_implemented",
}


def _request_start(data: bytes, completed: int, max_body: int) -> int | None:
    """Where in ``data`` (received from a request boundary on) the request
    after the first ``completed`` begins, or None if they do not parse: h11,
    the reference parser, reads them again and holds exactly the bytes it
    has not taken (llhttp reports no offsets). Only on the way to a refusal's
    answer, for requests already read and answered once, at most
    HEAD_KEEP_BYTES of them (and a read)."""
    parser = make_parser("h11", max_body)
    parser.feed(data)
    for _ in range(completed):
        event = parser.next_event()
        if event is CONTINUE:
            event = parser.next_event()
        if not isinstance(event, Request):
            return None
        parser.start_next_cycle()
    return len(data) - parser.buffered()


def _upgrade_refusal(request: Request) -> str | None:
    """Why an upgrade cannot switch, for what every upgrade route shares: the
    router serves HEAD with the GET handler, but only a GET opens a WebSocket
    (RFC 6455 4.1); and a body belongs to the HTTP request before the switch
    (RFC 9110 7.8), which h11 reads as one and llhttp passes on as the new
    protocol's first bytes, so neither parser's reading is taken."""
    if request.method != "GET":
        return "an upgrade needs GET"
    headers = request.headers
    if request.body or "transfer-encoding" in headers or headers.get("content-length", "0") != "0":
        return "an upgrade request has no body"
    return None


def _failure_response(exc: Exception, request: Request) -> Response:
    """The answer to what a handler raised: an ApiError's own, else a 500 (logged
    with its traceback)."""
    if isinstance(exc, ApiError):
        return _api_error_response(exc)
    log.error("unhandled error in %s %s", request.method, request.path, exc_info=exc)
    return error_response(500, "internal", "internal error")


def _api_error_response(exc: ApiError) -> Response:
    headers = tuple((k.encode("latin-1"), v.encode("latin-1")) for k, v in exc.headers)
    return error_response(exc.status, exc.code, exc.message, headers, exc.extra)


class _Sink(StreamSink):
    """The connection seen by a streaming handler."""

    __slots__ = ("_callbacks", "_done", "_drain_callbacks", "_protocol")

    def __init__(self, protocol: HttpProtocol) -> None:
        self._protocol = protocol
        self._callbacks: list[Callable[[], None]] = []
        self._drain_callbacks: list[Callable[[], None]] | None = None
        """None until a handler asks (the backup route and an SSE stream sending a
        snapshot do; most streams never do)."""
        self._done = False

    def write(self, data: bytes) -> None:
        if not self._done:
            self._protocol._write(data)

    def buffered(self) -> int:
        transport = self._protocol._transport
        return transport.get_write_buffer_size() if transport is not None else 0

    def close(self) -> None:
        if not self._done:
            self._protocol._close()
            self.lost()

    def abort(self) -> None:
        if not self._done:
            transport = self._protocol._transport
            if transport is not None:
                transport.abort()
            self._protocol._abort()
            self.lost()

    def on_close(self, callback: Callable[[], None]) -> None:
        if self._done:
            callback()
        else:
            self._callbacks.append(callback)

    def on_drain(self, callback: Callable[[], None]) -> None:
        if self._drain_callbacks is None:
            self._drain_callbacks = []
        self._drain_callbacks.append(callback)

    @property
    def closed(self) -> bool:
        return self._done

    def lost(self) -> None:
        if self._done:
            return
        self._done = True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("stream close callback failed")

    def drained(self) -> None:
        for callback in list(self._drain_callbacks or ()):
            callback()
