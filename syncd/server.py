"""The network edge: bind, accept, and stop gracefully.

Only this module (and the protocol objects it creates) touches sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import importlib
import ipaddress
import logging
import os
import platform
import signal
import socket
import ssl
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final, NoReturn, cast

from syncd import __version__
from syncd.app import App
from syncd.auth.admin import AdminSecretError
from syncd.bind import bind_refusal, host_port, present_addresses
from syncd.collector import settle_after_start
from syncd.config import Settings
from syncd.http.access import AccessLog
from syncd.http.parsers import resolve_parser_name
from syncd.http.protocol import MAX_REFUSED_LINGERING, HttpProtocol, ServerContext
from syncd.http.request import Request
from syncd.http.response import error_response, render
from syncd.journal import refuse
from syncd.sdnotify import Notifier
from syncd.store.embedded.store import StoreCorruptError, StoreLockedError
from syncd.store.pg_start import DatabaseSetupError
from syncd.tls import Certificates, FirstBytes, TlsError, first_bytes
from syncd.ws.connection import wait_background

log = logging.getLogger("syncd.server")

# Pending connections the kernel may queue for us; bursts of many clients
# connecting at once (benchmarks, reconnect storms) overflow small backlogs.
LISTEN_BACKLOG: Final = 4096
# How often graceful shutdown looks again for connections still answering.
SHUTDOWN_POLL_S: Final = 0.02

STOP_MARGIN_S: Final = 30.0
"""Beyond the stop's planned waits (drain, shutdown timeout, webhook drain),
what ``STOPPING=1`` asks systemd to wait for besides: closing the store (the
flush, extended further while it makes progress)."""

TLS_HANDSHAKES_PAST_LIMIT: Final = MAX_REFUSED_LINGERING
"""TLS connections still in their handshake count toward SERVICE_MAX_CONNECTIONS
with the open ones. Past the limit this many more may finish theirs, to read
the 503 that a plain connection past the limit reads; any one beyond is closed
at once. Without the bound, connections that never sent a ClientHello each
held a descriptor for the whole handshake timeout, however many there were:
enough of them used up the process's descriptors (LimitNOFILE), and every
client after them was cut off without an answer."""


class BindRefusedError(Exception):
    """The listening address of SERVICE_BIND was refused (in use, not on this
    machine, a port this user may not use): one line, like a bad setting."""

    def __init__(self, refusal: str) -> None:
        super().__init__(f"SERVICE_BIND: {refusal}")


class Server:
    def __init__(self, settings: Settings, app: App | None = None) -> None:
        self.settings = settings
        self.app = app or App(settings)
        self.parser_name = resolve_parser_name(settings.http_parser)
        metrics = self.app.metrics
        self.ctx = ServerContext(
            self.app.router,
            parser_name=self.parser_name,
            max_body=settings.max_body_bytes,
            header_timeout=settings.header_timeout_s,
            keepalive_timeout=settings.keepalive_timeout_s,
            send_timeout=settings.send_timeout_s,
            max_connections=settings.max_connections,
            # Without CORS origins there is never a header to add: no call per request.
            extra_headers=self.app.extra_headers if settings.cors_origins else None,
            on_response=metrics.http_response,
            on_request=_on_request(metrics.http_request, settings.access_log),
            trusted_proxies=settings.trusted_proxies,
        )
        metrics.build_info(
            version=__version__,
            python=platform.python_version(),
            http_parser=self.parser_name,
            store="postgresql" if settings.database_url else "embedded",
        )
        metrics.watch_connections(self.connections_open, settings.max_connections)
        self.app.server_ctx = self.ctx
        self._server: asyncio.AbstractServer | None = None
        self._handshakes: _TlsHandshakes | None = None
        self._port = settings.port
        self._stopped = asyncio.Event()
        self._hurry = asyncio.Event()
        """A second SIGTERM/SIGINT during the drain: the rest of it is skipped."""
        self._cut_short = asyncio.Event()
        """A stop signal during the shutdown: no more waiting for anyone."""
        self.notifier = Notifier()
        self._ready = False
        """READY=1 was sent: a SIGHUP's reload is announced (RELOADING=1)."""
        self.certificates: Certificates | None = None
        if settings.tls_cert is not None and settings.tls_key is not None:
            certificates = self.certificates = Certificates(settings.tls_cert, settings.tls_key)
            metrics.watch_tls_certificate(lambda: certificates.not_after)

    @property
    def port(self) -> int:
        return self._port

    def connections_open(self) -> int:
        """``service_connections_open``: the connections SERVICE_MAX_CONNECTIONS
        counts, TLS connections still in their handshake included."""
        handshakes = self._handshakes
        return self.ctx.connection_count + (handshakes.pending if handshakes is not None else 0)

    async def start(self) -> None:
        # Under systemd, a long recovery (a large data dir after a crash) is
        # not killed at TimeoutStartSec while it makes progress.
        self.notifier.start_extending("recovering storage")
        try:
            await self.app.start()
        finally:
            self.notifier.stop_extending()
        loop = asyncio.get_running_loop()
        ctx = self.ctx
        factory: Callable[[], asyncio.BaseProtocol]
        if self.certificates is None:
            factory = lambda: HttpProtocol(ctx, loop)  # noqa: E731
        else:
            # The loop's own TLS server (create_server's ssl=) would not say
            # how many handshakes are under way: the same TLS protocol is
            # made here, counted until its handshake ends.
            handshakes = self._handshakes = _TlsHandshakes(
                ctx,
                loop,
                self.certificates.context,
                # The handshake is what a TLS client sends first: it gets the time
                # anything on a new connection gets, not the loop's default 60 s.
                self.settings.header_timeout_s,
            )
            factory = handshakes.protocol
        try:
            hosts = present_addresses(self.settings.host)
            self._server = await listen(loop, factory, hosts, self.settings.port)
        except OSError as exc:
            # syncd serve checked the address before opening anything, but
            # it can be taken (or go) while the store recovers.
            refusal = bind_refusal(exc, self.settings.host, self.settings.port)
            if refusal is None:
                raise
            await self.app.close()
            raise BindRefusedError(refusal) from None
        sock: socket.socket = self._server.sockets[0]
        self._port = int(sock.getsockname()[1])
        log.info(
            "syncd %s listening on %s (%s, http parser %s, fsync %s)",
            __version__,
            host_port(self.settings.host, self.port),
            "https" if self.certificates is not None else "http",
            self.parser_name,
            self.settings.fsync,
        )
        self.notifier.ready(self._status())
        self._ready = True
        self.notifier.start_watchdog()

    def _status(self) -> str:
        return f"listening on port {self.port}"

    def reload(self) -> None:
        """SIGHUP (systemctl reload): a renewed certificate for new
        handshakes, nobody dropped; announced to systemd (RELOADING=1, then
        READY=1 when done, whether the reload worked or not) once the server
        is ready and until it stops. Without TLS there is nothing to reload,
        but SIGHUP's default action would kill the server on the spot."""
        announce = self._ready and not self.app.stopping
        if announce:
            self.notifier.reloading()
        try:
            if self.certificates is not None:
                self.certificates.reload()
            else:
                _nothing_to_reload()
        finally:
            if announce:
                self.notifier.ready(self._status())

    def request_stop(self) -> None:
        """SIGTERM or SIGINT: the first stops the server; another one during
        the drain ends the drain at once, and one during the shutdown after it
        ends the shutdown's waits (an operator who signals again is in a
        hurry; uvicorn's second Ctrl-C). The store is closed either way."""
        if not self._stopped.is_set():
            self._stopped.set()
        elif not self.ctx.closing:  # still draining
            if not self._hurry.is_set():
                log.info("second stop signal: no more drain")
            self._hurry.set()
        elif not self._cut_short.is_set():
            log.warning(
                "another stop signal: the shutdown waits no longer for in-flight"
                " requests, WebSocket closes or webhook deliveries"
            )
            self._cut_short.set()
            if self.app.webhooks is not None:
                self.app.webhooks.cut_short()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def shutdown(self) -> None:
        """Drain (serve on, not ready, each answer closing its connection),
        then stop accepting, let in-flight requests finish up to the deadline
        (or until another stop signal), flush storage."""
        settings = self.settings
        drain = settings.shutdown_drain_s if not self._hurry.is_set() else 0.0
        self.notifier.stopping(
            drain + settings.shutdown_timeout_s + settings.webhook_drain_s + STOP_MARGIN_S
        )
        self.notifier.stop_watchdog()
        # /health/ready is 503 from here on, on every connection, those open
        # before the signal included: nothing may call the node ready again.
        self.app.stopping = True
        ctx = self.ctx
        # And every answer from here on closes its connection (ServerContext.draining).
        ctx.draining = True
        await self._drain()
        ctx.closing = True  # past the drain: a stop signal now cuts the waits short
        if self._server is not None:
            self._server.close()
        for conn in list(ctx.connections):
            conn.shutdown()
        for other in list(ctx.other_connections):
            with contextlib.suppress(Exception):
                other.shutdown()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.shutdown_timeout_s
        cut_short = self._cut_short
        while (
            (any(c.busy for c in ctx.connections) or ctx.other_connections)
            and loop.time() < deadline
            and not cut_short.is_set()
        ):
            await asyncio.sleep(SHUTDOWN_POLL_S)
        if cut_short.is_set():
            self._cut_connections()
        for conn in list(ctx.connections):
            conn._close()
        # Closed WebSocket sessions write their presence leaves; the store
        # must still be open for them.
        waiting = asyncio.ensure_future(wait_background(max(0.0, deadline - loop.time())))
        cut = asyncio.ensure_future(cut_short.wait())
        await asyncio.wait((waiting, cut), return_when=asyncio.FIRST_COMPLETED)
        cut.cancel()
        if not waiting.done():
            waiting.cancel()
            log.warning(
                "shutdown cut short: disconnect ops of closed WebSocket sessions not awaited"
            )
        # Not cut short: it flushes the store, and acknowledged writes must stay
        # durable (the webhook drain in it ends early, see request_stop).
        # (The webhook drain is in it too: planned, at least that long.)
        self.notifier.start_extending(
            "closing storage",
            0.0 if cut_short.is_set() else settings.webhook_drain_s + STOP_MARGIN_S,
        )
        try:
            await self.app.close()
        finally:
            self.notifier.stop_extending()
        log.info("syncd stopped")

    def _cut_connections(self) -> None:
        """The shutdown was cut short: say what is dropped, and drop it."""
        ctx = self.ctx
        busy = sum(1 for c in ctx.connections if c.busy)
        others = list(ctx.other_connections)
        if busy or others:
            log.warning(
                "shutdown cut short: %d requests in flight and %d WebSocket connections"
                " waiting for their close handshake closed at once",
                busy,
                len(others),
            )
        for other in others:
            # Their close frame (1001) is sent already; only the peer's answer is not awaited.
            with contextlib.suppress(Exception):
                other.transport.abort()

    async def _drain(self) -> None:
        """Serve everything as before for ``shutdown_drain_s`` (new connections
        too) while /health/ready says 503: time for a load balancer that checks
        it to take the node out before the listener closes under its clients.
        HTTP answers carry ``Connection: close`` meanwhile, so keep-alive
        clients move to other nodes one request at a time; WebSockets stay."""
        drain = self.settings.shutdown_drain_s
        if drain <= 0 or self._hurry.is_set():
            return
        log.info(
            "draining for %g s: /health/ready answers 503, everything else is served"
            " (answers close their connections)",
            drain,
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._hurry.wait(), drain)


SHARED_PORT_ATTEMPTS: Final = 8
"""Port 0 on a host with several addresses: how many times a free port of
the first address is tried on the others before the start gives up (each
try fails only when another process has that port on another address)."""


async def listen(
    loop: asyncio.AbstractEventLoop,
    factory: Callable[[], asyncio.BaseProtocol],
    host: str | Sequence[str],
    port: int,
) -> asyncio.Server:
    """Listen on every address ``host`` resolves to, at ``port``. Port 0 is
    one free port for all of them: the loop would pick one per address
    (``localhost``: 127.0.0.1 and ::1 on two ports), and the one port the
    start's line and ``READY=1`` name would reach only the first. The free
    port the first address got is then asked for on all of them.

    The IPv6 wildcard (``[::]``) is one dual-stack socket
    (:func:`dual_stack_socket`), as in nginx and Go: IPv4 clients too."""
    if isinstance(host, str) and _is_ipv6_wildcard(host):
        sock = dual_stack_socket(port)
        if sock is not None:
            return await loop.create_server(factory, sock=sock, backlog=LISTEN_BACKLOG)
    server = await loop.create_server(
        factory,
        host=host,
        port=port,
        reuse_address=True,
        backlog=LISTEN_BACKLOG,
        start_serving=port != 0,
    )
    for _ in range(SHARED_PORT_ATTEMPTS):
        ports = [int(sock.getsockname()[1]) for sock in server.sockets]
        if port != 0 or len(set(ports)) == 1:
            await server.start_serving()
            return server
        # Not serving yet: nobody connected to these sockets.
        server.close()
        await server.wait_closed()
        try:
            server = await loop.create_server(
                factory,
                host=host,
                port=ports[0],
                reuse_address=True,
                backlog=LISTEN_BACKLOG,
                start_serving=False,
            )
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            # Another process has that port on another address: a new one.
            server = await loop.create_server(
                factory,
                host=host,
                port=0,
                reuse_address=True,
                backlog=LISTEN_BACKLOG,
                start_serving=False,
            )
    server.close()
    await server.wait_closed()
    raise OSError(errno.EADDRINUSE, "no free port is free on every address of the host")


def _is_ipv6_wildcard(host: str) -> bool:
    """``host`` is ``::`` (SERVICE_BIND ``[::]:PORT``), without a zone."""
    try:
        return ipaddress.IPv6Address(host).is_unspecified
    except ValueError:
        return False


def dual_stack_socket(port: int) -> socket.socket | None:
    """A listening socket on ``[::]:port`` that takes IPv4 clients too (as
    ``::ffff:a.b.c.d``), or None where the host cannot make one (a kernel
    that keeps IPv6 sockets IPv6 only): the loop's own bind then. The loop's
    create_server sets IPV6_V6ONLY on every IPv6 socket, so ``[::]`` took
    IPv6 clients only: an IPv4 client of ``[::]:3000`` was refused, where
    nginx, Go and most servers (and SERVICE_BIND's documented meaning, every
    address) serve both. A bind error (the port taken on either family)
    keeps its errno, as the loop's does."""
    if not socket.has_dualstack_ipv6():
        return None
    return socket.create_server(
        ("::", port), family=socket.AF_INET6, backlog=LISTEN_BACKLOG, dualstack_ipv6=True
    )


class _TlsHandshakes:
    """Each accepted connection's TLS protocol (the loop's own, the one its
    ssl= server makes), made once its first bytes are a TLS record
    (:class:`_FirstBytesProtocol`); counted from the accept to the end of its
    handshake, from then on the HttpProtocol inside counts it. Past
    SERVICE_MAX_CONNECTIONS plus :data:`TLS_HANDSHAKES_PAST_LIMIT`, a new
    connection is closed at once."""

    def __init__(
        self,
        ctx: ServerContext,
        loop: asyncio.AbstractEventLoop,
        context: ssl.SSLContext,
        handshake_timeout: float,
    ) -> None:
        self.ctx = ctx
        self.loop = loop
        self.context = context
        self.handshake_timeout = handshake_timeout
        self.pending = 0
        # uvloop's TLS protocol on its loop, asyncio's on asyncio's: the same
        # constructor, the one each loop's create_server(ssl=...) calls.
        module = "uvloop.loop" if type(loop).__module__.startswith("uvloop") else "asyncio.sslproto"
        self.tls_protocol: Any = importlib.import_module(module).SSLProtocol

    def protocol(self) -> asyncio.BaseProtocol:
        ctx = self.ctx
        if self.pending + ctx.connection_count >= ctx.max_connections + TLS_HANDSHAKES_PAST_LIMIT:
            return _Refused()
        self.pending += 1
        return _FirstBytesProtocol(self)

    def start_tls(self, transport: asyncio.Transport, first: bytes, timeout: float) -> None:
        """Hand ``transport`` to the loop's TLS protocol, as its ssl= server
        would have at the accept, with the bytes already read from it and
        what is left of the handshake's time; counted until the handshake
        ends."""
        handshake: asyncio.Future[None] = self.loop.create_future()
        handshake.add_done_callback(self._handshake_ended)
        protocol = self.tls_protocol(
            self.loop,
            HttpProtocol(self.ctx, self.loop),
            self.context,
            handshake,
            server_side=True,
            ssl_handshake_timeout=timeout,
        )
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        _feed(protocol, first)

    def not_tls(self) -> None:
        """A connection that ended before it started a handshake."""
        self.pending -= 1

    def _handshake_ended(self, handshake: asyncio.Future[None]) -> None:
        self.pending -= 1
        if not handshake.cancelled():
            # A failed handshake has closed its connection already; its
            # error is read so that asyncio does not log it as never retrieved.
            handshake.exception()


def _feed(protocol: Any, data: bytes) -> None:
    """Give ``data`` to a buffered protocol as its transport would."""
    view = memoryview(data)
    while view:
        buffer = protocol.get_buffer(len(view))
        size = min(len(buffer), len(view))
        buffer[:size] = view[:size]
        protocol.buffer_updated(size)
        view = view[size:]


PLAIN_HTTP_REFUSAL: Final = "this port speaks HTTPS: use https://"
"""What a plain HTTP request to the TLS port is told, in a plaintext 400 (as
Go's net/http and nginx answer one): it was closed without a word, which
clients report as an empty reply or a reset, nothing that names the cause."""


def _plain_http_answer() -> bytes:
    """The 400 of :data:`PLAIN_HTTP_REFUSAL`, in syncd's error format (its
    Date header is now's, so rendered for each)."""
    return render(error_response(400, "bad_request", PLAIN_HTTP_REFUSAL), keep_alive=False)


PLAIN_HTTP_DISCARD_BYTES: Final = 64 * 1024
"""What the rest of a plain HTTP request may send after its 400 before its
connection is closed anyway: its headers, a small body. Read and dropped, not
left unread, as a close with unread bytes is a reset that can destroy the 400
before the client has read it."""


class _FirstBytesProtocol(asyncio.Protocol):
    """A new connection on the TLS port until its first bytes say what it
    speaks (:func:`syncd.tls.first_bytes`): a TLS client's connection goes to
    the TLS protocol with its first read (one byte judged), a plain HTTP
    request gets a 400 (:data:`PLAIN_HTTP_REFUSAL`), anything else is closed. Waiting
    for those bytes is part of the handshake's time (SERVICE_HEADER_TIMEOUT_S),
    and the connection counts toward the limit meanwhile, as one in its
    handshake does."""

    def __init__(self, handshakes: _TlsHandshakes) -> None:
        self._handshakes = handshakes
        self._transport: asyncio.Transport | None = None
        self._seen = b""
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._answered = False
        self._discarded = 0
        self._counted = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        loop = self._handshakes.loop
        timeout = self._handshakes.handshake_timeout
        self._deadline = loop.time() + timeout
        self._timer = loop.call_later(timeout, self._timed_out)

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        if transport is None:
            return
        if self._answered:
            self._discarded += len(data)
            if self._discarded > PLAIN_HTTP_DISCARD_BYTES:
                self._end(transport)
            return
        seen = self._seen + data if self._seen else data
        verdict = first_bytes(seen)
        if verdict is FirstBytes.UNDECIDED:
            self._seen = seen
        elif verdict is FirstBytes.TLS:
            self._start_tls(transport, seen)
        elif verdict is FirstBytes.PLAIN_HTTP:
            self._answer(transport)
        else:
            self._end(transport)

    def eof_received(self) -> bool | None:
        return None  # the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._stop_timer()
        self._uncount()

    def _start_tls(self, transport: asyncio.Transport, first: bytes) -> None:
        self._stop_timer()
        self._seen = b""
        left = self._deadline - self._handshakes.loop.time()
        if left <= 0:
            self._end(transport)
            return
        self._counted = False  # from here until its handshake ends, counted by the TLS side
        self._transport = None
        self._handshakes.start_tls(transport, first, left)

    def _answer(self, transport: asyncio.Transport) -> None:
        """The 400, then the end of the connection: this side's end at once,
        the rest of the request read and dropped until the client closes
        (or the handshake's time is up)."""
        self._answered = True
        self._seen = b""
        transport.write(_plain_http_answer())
        if transport.can_write_eof():
            transport.write_eof()
        else:  # pragma: no cover - TCP transports can
            self._end(transport)

    def _timed_out(self) -> None:
        self._timer = None
        if self._transport is not None:
            self._end(self._transport)

    def _end(self, transport: asyncio.Transport) -> None:
        self._stop_timer()
        transport.close()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _uncount(self) -> None:
        if self._counted:
            self._counted = False
            self._handshakes.not_tls()


class _Refused(asyncio.Protocol):
    """A connection past :data:`TLS_HANDSHAKES_PAST_LIMIT`: closed as accepted."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        cast(asyncio.Transport, transport).abort()


def _on_request(
    observe: Callable[[str, int, float], None], access_log: bool
) -> Callable[[Request, int, float], None]:
    """What each answered request is handed to: the latency histogram, and
    the access log when it is on."""
    if not access_log:
        return lambda request, status, seconds: observe(request.route, status, seconds)
    write = AccessLog()

    def both(request: Request, status: int, seconds: float) -> None:
        observe(request.route, status, seconds)
        write(request, status, seconds)

    return both


async def _serve(settings: Settings) -> int:
    try:
        server = Server(settings)
    except TlsError as exc:
        return refuse("syncd", str(exc))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.request_stop)
    loop.add_signal_handler(signal.SIGHUP, server.reload)
    try:
        started = await _start_unless_stopped(server)
    except (
        StoreLockedError,
        StoreCorruptError,
        AdminSecretError,
        DatabaseSetupError,
        BindRefusedError,
    ) as exc:
        # A data directory in use or damaged where a crash cannot have damaged
        # it (the message names the file, the offset and what to do), an
        # admin_token file that cannot be used, or a database that refuses
        # this node (no such database, a refused password, a wal_level that
        # cannot stream), or a listening address refused: one line naming
        # it, like a bad setting (an error for the journal, under systemd).
        return refuse("syncd", str(exc))
    except OSError as exc:
        refusal = start_refusal(exc)
        if refusal is not None:
            return refuse("syncd", refusal)
        log.error("cannot start: %s", exc)
        return 1
    if not started:
        log.info("syncd stopped before it started")
        _exit(0)
    settle_after_start()
    await server.wait_stopped()
    await server.shutdown()
    _exit(0)


_NOT_ITS_USER: Final = (
    "the data directory and its files must belong to the user syncd runs as"
    " (were they made by another, such as root?)"
)
_IN_THE_WAY: Final = "not what syncd keeps there: move it out of the data directory"
REFUSED_START_ERRNOS: Final = {
    errno.EACCES: _NOT_ITS_USER,
    errno.EPERM: _NOT_ITS_USER,
    errno.EROFS: "the data directory must be on a writable file system",
    errno.EEXIST: _IN_THE_WAY,
    errno.ENOTDIR: _IN_THE_WAY,
    errno.EISDIR: _IN_THE_WAY,
}
"""The errors of a start (opening the store's files) that no restart cures,
each with what to do: a refusal (exit 2, one line), which the unit does not
restart (RestartPreventExitStatus=2). They exited 1, and systemd restarted
the node every RestartSec for ever, the same error in the journal each time.
Any other error (no space left, too many open files, an I/O error) may pass:
exit 1, restarted (within the unit's start limit)."""


def start_refusal(error: OSError) -> str | None:
    """The one line of a start that failed with ``error`` when it is one of
    :data:`REFUSED_START_ERRNOS`, or None (exit 1, restarted)."""
    if error.errno is None or error.errno not in REFUSED_START_ERRNOS:
        return None
    what = f"{error.filename}: " if error.filename else ""
    reason = error.strerror or os.strerror(error.errno)
    return f"cannot start: {what}{reason} ({REFUSED_START_ERRNOS[error.errno]})"


def _nothing_to_reload() -> None:
    log.info("SIGHUP: nothing to reload (TLS is off; every other setting is read at start)")


async def _start_unless_stopped(server: Server) -> bool:
    """Start ``server``; False when SIGTERM or SIGINT came first.

    A cluster node's start waits for PostgreSQL for as long as it is away
    (syncd.store.pg_start), so a stop request cancels it: nothing has been
    served, and what it opened is closed. The embedded store's start (its
    recovery: reading the snapshot, the log and the history, cutting a torn
    tail) runs in its I/O thread and cannot be cancelled half-way, and closing
    the store would wait for it: a stop that comes meanwhile ends the process
    at once (:func:`_exit_during_recovery`)."""
    starting = asyncio.ensure_future(server.start())
    stopping = asyncio.ensure_future(server.wait_stopped())
    try:
        await asyncio.wait((starting, stopping), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if starting.done():
        starting.result()  # its exception, if it failed
        return True
    if not server.settings.database_url:
        _exit_during_recovery()
    starting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await starting
    await server.app.close()
    return False


def _exit_during_recovery() -> NoReturn:
    """SIGTERM or SIGINT while the embedded store recovers: exit 0 now, as
    ``systemctl stop`` asks, rather than after a recovery that may take as
    long as ``TimeoutStartSec``. Nothing has been served or acknowledged yet;
    the recovery's writes (a torn tail cut, history appended from the log)
    are each safe to stop at any point, as a crash there is (the next start
    recovers again, from the same files), and the process holds the
    directory's lock until it is gone."""
    log.warning(
        "stop signal during the store's recovery: exiting without finishing it"
        " (nothing was served yet; the next start recovers again)"
    )
    _exit(0)


def _exit(code: int) -> NoReturn:
    """End the process now, with ``code``: the server is stopped and its store
    closed (or never opened; or see :func:`_exit_during_recovery`). What the interpreter would still do (the loop's
    teardown, then freeing the whole state module by module) keeps no data,
    and it takes SIGTERM and SIGINT from the loop back to their defaults on
    the way: a second signal then (``systemctl kill``, a hurried Ctrl-C)
    killed the process, status -15 where 0 is documented, or printed a
    KeyboardInterrupt traceback. Until this call the loop's handler
    (:meth:`Server.request_stop`) takes them."""
    logging.shutdown()
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def run(settings: Settings) -> int:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; this is for odd platforms
        return asyncio.run(_serve(settings))
    if sys.version_info >= (3, 12):
        return uvloop.run(_serve(settings))  # type: ignore[no-any-return]
    uvloop.install()
    return asyncio.run(_serve(settings))
