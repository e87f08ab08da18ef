"""Delta streams that survive reconnects: ``subscribe`` (WebSocket) and ``events`` (SSE).

Both are async iterators of deltas (docs/protocol.md#deltas) that hide connection
loss: after a drop they wait (exponential backoff with jitter; a refusal
``rate_limited`` waits at least its ``Retry-After``), reconnect and
resubscribe with ``since`` and ``epoch`` per id, so the service replays the
missed ops, or sends a snapshot when it cannot. A :class:`ResumeTracker`
judges every delta: repeats are skipped, and a gap in ``seq`` (a lost delta)
triggers a resubscription (WebSocket: subscribe again on the same socket,
which the service takes as a fresh start for that id; SSE: a new request),
so the application sees each seq once, in
order, or a snapshot that replaces what it had. A WebSocket subscribe the
service refuses over the token's rate limit is sent again on the same socket
once its ``retry_after`` has passed.

The service ends each subscription's start (the snapshot, the replay, or
nothing when the resume was up to date) with a ``synced`` message
(docs/protocol.md#resuming): it is never taken for a delta. It sets
:meth:`_ResumingStream.is_synced` for that id until the next reconnect or
resubscription, and with ``synced_events=True`` it is also yielded, in
order, as ``{"kind": "synced", "ns", "id", "seq", "epoch"}``.

Errors that retrying cannot fix end the iteration by raising: a refused
connection or subscription (ServiceError: 401, 403, ...), a subscription or
stream the service ended because its read did (an ``error`` message over the
WebSocket, the ``end`` event of an SSE stream: ``token_expired``,
``forbidden`` for an expired rule, ``token_revoked`` as TokenRevokedError),
and an expired token (TokenExpiredError, checked locally before every
reconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any, Final, NoReturn, Protocol

import httpx
import msgpack
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from syncd.client._http import ClientCore, error_from
from syncd.client.config import ClientConfig
from syncd.client.errors import MessageTooLargeError, service_error
from syncd.client.resume import RECONNECT_BASE_S, RECONNECT_MAX_S, Backoff, ResumeTracker, Verdict
from syncd.client.retry import RETRY_AFTER_MAX_S
from syncd.client.sse import (
    END,
    MAX_EVENT_BYTES,
    MESSAGE,
    SYNCED,
    SseEvent,
    SseEventTooLarge,
    SseParser,
    SseProtocolError,
    decode_delta,
    decode_end,
)

Delta = dict[str, Any]


class StreamClient(Protocol):
    """What a stream needs of its client (``AsyncClient``)."""

    core: ClientCore
    config: ClientConfig
    timeout: float

    @property
    def http(self) -> httpx.AsyncClient: ...

    def check_token(self) -> None: ...


MAX_MESSAGE_BYTES: Final = MAX_EVENT_BYTES
"""One WebSocket message (a snapshot of a large document): bounds the memory
a broken or hostile server can make the client hold. As an SSE event's
bound, twice the server's default SERVICE_MAX_CRDT_BYTES: a snapshot's state
may pass that limit by a sixteenth (a Yjs delete-only update), which a
bound of the limit's bytes refused; ``max_message_bytes`` sets it for a
server with a larger limit."""

SSE_READ_TIMEOUT_S: Final = 45.0
"""Silence after which an SSE stream counts as dead: three missed 15 s pings."""

CLOSE_TOO_BIG: Final = 1009
"""The close code a WebSocket endpoint sends for a message over its bound (RFC 6455)."""

DELTA_KINDS: Final = frozenset({"snapshot", "op", "deleted"})

SUBSCRIBE_RETRY_DEFAULT_S: Final = 1.0
"""The wait before sending again a subscribe refused ``rate_limited`` without
a usable ``retry_after``: the service's rate window (limits are per second)."""

# Error codes of a WebSocket ``error`` message worth a reconnect, not an exception.
_RETRY_CODES: Final = frozenset({"rate_limited", "unavailable", "internal"})
_CODE_STATUS: Final = {
    "missing_token": 401,
    "invalid_token": 401,
    "token_expired": 401,
    "token_revoked": 401,
    "forbidden": 403,
    "not_found": 404,
    "rate_limited": 429,
    "internal": 500,
    "unavailable": 503,
    "type_mismatch": 409,
    "cycle": 409,
    "payload_too_large": 413,
}


def check_ids(ids: Iterable[str]) -> None:
    """TypeError for one id given where a list of ids is asked (a string is an
    iterable of its characters, each of which is a valid id)."""
    if isinstance(ids, str | bytes):
        raise TypeError(f"ids must be a list of CRDT ids, not one string: [{ids!r}]")


class _Lost(Exception):
    """The connection is gone or could not be made, and retrying may help;
    ``retry_after``: the seconds the service asked to wait first (a 429's
    ``Retry-After``, a rate-limited ``error`` message's ``retry_after``)."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


def _retry_after(value: Any) -> float | None:
    """A usable wait from a message's ``retry_after`` (seconds), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


class _ResumingStream(ABC):
    def __init__(
        self,
        client: StreamClient,
        ids: Iterable[str],
        *,
        backoff_base_s: float = RECONNECT_BASE_S,
        backoff_max_s: float = RECONNECT_MAX_S,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        synced_events: bool = False,
    ) -> None:
        self._client = client
        check_ids(ids)
        self._tracker = ResumeTracker(dict.fromkeys(ids))
        if not self._tracker.ids:
            raise ValueError("subscribe to at least one id")
        self._ready: deque[Delta] = deque()
        self._backoff = Backoff(backoff_base_s, backoff_max_s)
        self._sleep = sleep
        self._retry_at: float | None = None
        """Loop time before which no connection is tried (the backoff's wait,
        or the service's ``retry_after``). Kept while a reader cancelled in
        the wait (its own read timeout) is away, so its next read waits the
        rest: it tried again at once, an attempt per read."""
        self._attempt: asyncio.Task[None] | None = None
        """The connection attempt under way (connect, request, the answer's
        head): a task of the stream's own, so a reader cancelled in it (its
        own read timeout, shorter than the server takes to answer) leaves it
        running and its next read awaits the same attempt. Cancelled at the
        reader's cancellation, a slow server got a new attempt per read and
        was never connected to. Cancelled only by :meth:`aclose`."""
        self._connected = False
        self._closed = False
        self._failure: Exception | None = None
        """The error that ends the stream while it closes: raised by the next
        read when the one closing was cancelled first (its own timeout)."""
        self._synced_events = synced_events
        self._synced: set[str] = set()
        """Ids whose start has all arrived since the last (re)subscribe."""
        self.connects = 0
        """Connections made (the first included)."""
        self.resyncs = 0
        """Gaps detected and resubscribed for."""

    @property
    def ids(self) -> list[str]:
        return self._tracker.ids

    def position(self, crdt_id: str) -> tuple[int, str | None]:
        """``(seq, epoch)`` of the last delta delivered for ``crdt_id``."""
        pos = self._tracker.position(crdt_id)
        return pos.seq, pos.epoch

    def is_synced(self, crdt_id: str) -> bool:
        """Whether ``crdt_id``'s start (a snapshot, or the replay of what was
        missed, even when that was nothing) has all arrived since it was last
        (re)subscribed: the service's ``synced`` message came. False again
        from a disconnect until the next one."""
        return crdt_id in self._synced

    def __aiter__(self) -> AsyncIterator[Delta]:
        return self

    async def __anext__(self) -> Delta:
        while True:
            if self._ready:
                return self._ready.popleft()
            if self._closed:
                failure, self._failure = self._failure, None
                if failure is not None:
                    raise failure
                raise StopAsyncIteration
            if not self._connected:
                await self._open()
                continue
            try:
                message = await self._receive()
            except _Lost:
                await self._lost()
                continue
            if message.get("kind") != "error":
                # The connection works (an error, retried, says it does not:
                # a service refusing every subscribe is not knocked at faster).
                self._backoff.reset()
            await self._handle(message)

    async def _open(self) -> None:
        self._unsynced()  # every id starts again on the new connection
        while True:
            await self._wait_to_retry()
            if self._closed:
                return
            attempt = self._attempt
            if attempt is None:
                attempt = self._attempt = asyncio.ensure_future(self._attempt_connection())
            try:
                # Shielded: the reader's cancellation leaves the attempt running.
                await asyncio.shield(attempt)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if attempt.cancelled() and (task is None or not task.cancelling()):
                    return  # aclose() (another task) ended the attempt: closed
                raise
            except _Lost:
                self._attempt = None
                # What is left of the wait the attempt set when it failed.
                await self._wait_to_retry()
                continue
            except Exception as exc:
                # Final (refused, expired token). A cancellation is not: the
                # caller may be timing out one read and come back for more.
                self._attempt = None
                if self._closed:
                    return  # aclose() came first: the refusal is nobody's now
                await self._close_failing(exc)
                raise
            self._attempt = None
            if self._closed:
                return  # aclose() came first and closed what it connected
            self._connected = True
            self.connects += 1
            return

    async def _attempt_connection(self) -> None:
        """One attempt, in its own task (:attr:`_attempt`). A failure worth
        retrying sets the next attempt's time here, as it happens: the read
        that started the attempt may have been cancelled (its own timeout),
        and the next one may come much later. Taken at that read, the
        backoff, or the service's ``retry_after``, was waited in full again
        after it had passed while the reader was away. A final error is kept
        with the task for the next read, which raises it (the stream's end),
        unless :meth:`aclose` drops it first."""
        try:
            self._client.check_token()
            await self._disconnect()  # what a failed attempt may have left
            await self._connect()
        except _Lost as lost:
            if not self._closed:
                self._retry_later(lost.retry_after)
            raise

    async def _end_attempt(self) -> None:
        """Cancel the attempt under way and wait for it to end, so it leaves
        no connection behind the stream's close."""
        attempt, self._attempt = self._attempt, None
        if attempt is None:
            return
        attempt.cancel()
        await asyncio.wait([attempt])
        if not attempt.cancelled():
            with contextlib.suppress(Exception):
                attempt.result()  # retrieved: its failure no longer matters

    def _unsynced(self, crdt_id: str | None = None) -> None:
        """Not synced (one id resubscribed, or every id: a new connection)."""
        if crdt_id is None:
            self._synced.clear()
        else:
            self._synced.discard(crdt_id)

    async def _lost(self, retry_after: float | None = None) -> None:
        self._connected = False
        self._unsynced()
        delay = None if self._closed else self._retry_later(retry_after)
        await self._disconnect()
        if delay is not None and not self._closed:
            await self._wait_to_retry(delay)

    def _retry_later(self, retry_after: float | None) -> float:
        """Set the time of the next attempt; the wait until it."""
        delay = self._delay(retry_after)
        self._retry_at = asyncio.get_running_loop().time() + delay
        return delay

    async def _wait_to_retry(self, delay: float | None = None) -> None:
        """Wait until the next attempt's time: ``delay`` when it was just
        set, else what is left of it (none when no attempt failed)."""
        retry_at = self._retry_at
        if retry_at is None:
            return
        if delay is None:
            delay = retry_at - asyncio.get_running_loop().time()
        if delay > 0:
            await self._sleep(delay)
        self._retry_at = None

    def _delay(self, retry_after: float | None) -> float:
        """The wait before reconnecting: the backoff's, or the service's
        ``retry_after`` when longer (at most :data:`RETRY_AFTER_MAX_S`, as
        :func:`syncd.client.retry.with_retries` honours it): knocking sooner
        would only be refused again."""
        delay = self._backoff.next_delay()
        if retry_after is not None and math.isfinite(retry_after):
            delay = max(delay, min(retry_after, RETRY_AFTER_MAX_S))
        return delay

    async def _handle(self, message: Delta) -> None:
        kind = message.get("kind")
        if kind == "error":
            code = str(message.get("error", "error"))
            if code == "rate_limited" and self._subscribe_later(message):
                return
            if code in _RETRY_CODES:
                await self._lost(_retry_after(message.get("retry_after")))
                return
            # The body as an HTTP refusal's: the error, its message and what
            # else it carries (the ``id`` a WebSocket refusal is about).
            body = {key: value for key, value in message.items() if key != "kind"}
            error = service_error(
                _CODE_STATUS.get(code, 400),
                code,
                str(message.get("message", "")),
                _retry_after(message.get("retry_after")),
                body,
            )
            await self._close_failing(error)
            raise error
        if kind == SYNCED:
            crdt_id = message.get("id")
            if isinstance(crdt_id, str) and crdt_id in self.ids:
                self._synced.add(crdt_id)
                if self._synced_events:
                    self._ready.append(message)
            return
        if kind not in DELTA_KINDS:
            return
        verdict = self._tracker.accept(message)
        if verdict is Verdict.DELIVER:
            self._ready.append(message)
        elif verdict is Verdict.RESYNC:
            self.resyncs += 1
            self._unsynced(message["id"])
            await self._resync(message["id"])

    async def _close_failing(self, error: Exception) -> None:
        """Close for ``error``, which the caller raises next; a reader
        cancelled while the stream closes (a WebSocket close waits for the
        server's answer) gets it at its next read instead of an iteration
        that just ends."""
        self._failure = error
        await self.aclose()
        self._failure = None

    async def aclose(self) -> None:
        self._closed = True
        self._connected = False
        self._unsynced()
        await self._end_attempt()
        await self._disconnect()

    async def __aenter__(self) -> _ResumingStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @abstractmethod
    async def _connect(self) -> None:
        """Connect and subscribe at the tracker's positions; _Lost when worth retrying."""

    @abstractmethod
    async def _receive(self) -> Delta:
        """The next message; _Lost when the connection is gone."""

    @abstractmethod
    async def _resync(self, crdt_id: str) -> None:
        """Ask again for ``crdt_id`` from the tracker's position."""

    @abstractmethod
    async def _disconnect(self) -> None: ...

    def _subscribe_later(self, message: Delta) -> bool:
        """A subscribe refused ``rate_limited`` (``message``): True when it
        will be sent again on this connection, False to reconnect instead."""
        return False


class Subscription(_ResumingStream):
    """Deltas of several CRDTs over one WebSocket (binary msgpack frames)::

    async with client.subscribe(["gc:visits", "or:cart-1"]) as sub:
        async for delta in sub:
            ...
    """

    def __init__(
        self,
        client: StreamClient,
        ids: Iterable[str],
        *,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        open_timeout_s: float | None = None,
        **options: Any,
    ) -> None:
        super().__init__(client, ids, **options)
        self._max_message_bytes = max_message_bytes
        self._open_timeout = open_timeout_s if open_timeout_s is not None else client.timeout
        self._ws: ClientConnection | None = None
        self._later: dict[str, float] = {}
        """Ids whose subscribe is still to be sent on this connection -> when
        (loop time): a resync's, at once, and one that met the token's rate
        limit, once its wait is over (the server changed nothing for it, and
        a reconnect would send every subscribe at once again: with more ids
        than the limit allows per second, for ever). An id leaves only once
        its send has returned."""

    def _subscribe_later(self, message: Delta) -> bool:
        crdt_id = message.get("id")
        if not isinstance(crdt_id, str) or crdt_id not in self.ids:
            return False
        wait = _retry_after(message.get("retry_after"))
        delay = SUBSCRIBE_RETRY_DEFAULT_S
        if wait is not None and wait > 0:
            # Capped as every Retry-After the client honours: a longer one
            # waits the cap (the subscribe is refused again if still early).
            delay = min(wait, RETRY_AFTER_MAX_S)
        self._later[crdt_id] = asyncio.get_running_loop().time() + delay
        return True

    async def _subscribe_due(self) -> float | None:
        """Send the subscribes whose wait is over; the seconds until the
        next one is due (None: none waits)."""
        later = self._later
        if not later:
            return None
        now = asyncio.get_running_loop().time()
        for crdt_id, at in list(later.items()):
            if at <= now:
                await self._send(self._subscribe_message(crdt_id))
                # Only now: a reader cancelled while the socket had no room
                # (the send waiting to drain) sends it again at its next read,
                # rather than leave the id without a subscription.
                later.pop(crdt_id, None)
        return max(min(later.values()) - now, 0.0) if later else None

    async def _connect(self) -> None:
        try:
            ws = await connect(
                self._client.config.ws_url,
                additional_headers=self._client.core.headers,
                max_size=self._max_message_bytes,
                open_timeout=self._open_timeout,
                compression=None,
            )
        except InvalidStatus as exc:
            response = exc.response
            error = error_from(response.status_code, response.headers, bytes(response.body or b""))
            if error.retryable:
                raise _Lost(str(error), error.retry_after) from exc
            raise error from None
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise _Lost(repr(exc)) from exc
        self._ws = ws
        try:
            for crdt_id in self.ids:
                await self._send(self._subscribe_message(crdt_id))
        except _Lost:
            await self._disconnect()
            raise

    def _subscribe_message(self, crdt_id: str) -> Delta:
        message: Delta = {"kind": "subscribe", "id": crdt_id}
        resume = self._tracker.resume_from(crdt_id)
        if resume is not None:
            message["since"], message["epoch"] = resume
        return message

    async def _send(self, message: Delta) -> None:
        assert self._ws is not None
        try:
            await self._ws.send(msgpack.packb(message, use_bin_type=True))
        except ConnectionClosed as exc:
            raise _Lost(repr(exc)) from exc

    async def _receive(self) -> Delta:
        ws = self._ws
        if ws is None:
            raise _Lost("not connected")
        try:
            while True:
                wait = await self._subscribe_due()
                if wait is None:
                    frame = await ws.recv()
                    break
                try:
                    # Cancelling recv() loses nothing (websockets): the
                    # message waits for the next call.
                    frame = await asyncio.wait_for(ws.recv(), wait)
                    break
                except TimeoutError:
                    continue
        except ConnectionClosed as exc:
            if exc.sent is not None and exc.sent.code == CLOSE_TOO_BIG:
                error = MessageTooLargeError(
                    f"a WebSocket message over {self._max_message_bytes} bytes"
                )
                await self._close_failing(error)
                raise error from None
            raise _Lost(repr(exc)) from exc
        try:
            if isinstance(frame, bytes):
                message = msgpack.unpackb(frame, raw=False, strict_map_key=False)
            else:
                message = json.loads(frame)
        except ValueError as exc:
            raise _Lost(f"an undecodable frame: {exc}") from exc
        if not isinstance(message, dict):
            raise _Lost("a frame that is not a map")
        return message

    async def _resync(self, crdt_id: str) -> None:
        # One subscribe, due at once: the service starts a subscription to an
        # id already subscribed afresh, from the ``since`` sent. Sent by the
        # next _receive (the iteration's next step), and kept due until sent,
        # so no cancelled reader can leave the id unsubscribed: it was an
        # unsubscribe and a subscribe, and a reader cancelled while the socket
        # had no room for the first never sent the second.
        self._later[crdt_id] = 0.0

    async def _disconnect(self) -> None:
        self._later.clear()  # the next connection subscribes every id
        ws, self._ws = self._ws, None
        if ws is not None:
            _read_to_the_end(ws)
            await ws.close()


def _read_to_the_end(ws: ClientConnection) -> None:
    """Let ``ws`` read on while it closes, whatever it holds unread.

    With more messages unread than its queue's mark, websockets stops reading
    the socket (backpressure), and then the server's answer to our close
    frame, behind those messages, never arrives: ``close()`` waits its whole
    close timeout (10 s). What is unread is dropped anyway, and the server
    sends nothing after our close frame, so the flow control is lifted."""
    messages = getattr(ws, "recv_messages", None)
    if messages is None or not hasattr(messages, "paused"):
        return  # another websockets: its own close behaviour
    messages.high = messages.low = None
    if messages.paused:
        messages.paused = False
        messages.resume()


class EventStream(_ResumingStream):
    """Deltas of one CRDT over SSE (``GET .../crdts/:id/events``)::

    async with client.events("gc:visits") as stream:
        async for delta in stream:
            ...
    """

    def __init__(
        self,
        client: StreamClient,
        crdt_id: str,
        *,
        read_timeout_s: float = SSE_READ_TIMEOUT_S,
        max_event_bytes: int = MAX_EVENT_BYTES,
        **options: Any,
    ) -> None:
        super().__init__(client, [crdt_id], **options)
        self.crdt_id = crdt_id
        self._read_timeout = read_timeout_s
        self._max_event_bytes = max_event_bytes
        self._response: httpx.Response | None = None
        self._chunks: AsyncIterator[bytes] | None = None
        self._read: asyncio.Future[bytes] | None = None
        self._events: deque[SseEvent] = deque()
        self._parser = SseParser(max_event_bytes)

    async def _connect(self) -> None:
        client = self._client
        params: dict[str, str] = {}
        resume = self._tracker.resume_from(self.crdt_id)
        if resume is not None:
            params = {"since": str(resume[0]), "epoch": resume[1]}
        http = client.http
        request = http.build_request(
            "GET",
            client.config.crdt_url(self.crdt_id, "/events"),
            params=params,
            headers={"accept": "text/event-stream"},
            timeout=httpx.Timeout(client.timeout, read=self._read_timeout),
        )
        try:
            response = await http.send(request, stream=True)
        except httpx.TransportError as exc:
            raise _Lost(repr(exc)) from exc
        if response.status_code != 200:
            try:
                content = await response.aread()
            except httpx.HTTPError as exc:
                raise _Lost(repr(exc)) from exc
            finally:
                await response.aclose()
            error = error_from(response.status_code, response.headers, content)
            if error.retryable:
                raise _Lost(str(error), error.retry_after)
            raise error
        self._response = response
        self._chunks = response.aiter_bytes()
        self._events.clear()
        self._parser = SseParser(self._max_event_bytes)

    async def _receive(self) -> Delta:
        while True:
            event = await self._next_event()
            if event.name == MESSAGE:
                try:
                    return decode_delta(event.data)
                except SseProtocolError as exc:
                    raise _Lost(str(exc)) from exc
            if event.name == SYNCED:
                try:
                    return decode_delta(event.data)  # base64 msgpack, as a delta's data
                except SseProtocolError as exc:
                    raise _Lost(str(exc)) from exc
            if event.name == END:
                # The read ended (expiry, revocation): an error, handled as
                # the WebSocket's is. A broken one: reconnecting will tell.
                try:
                    return decode_end(event.data)
                except SseProtocolError as exc:
                    raise _Lost(str(exc)) from exc
            # Another name: an event this client does not know; skipped.

    async def _next_event(self) -> SseEvent:
        while not self._events:
            if self._chunks is None:
                raise _Lost("not connected")
            if (too_large := self._parser.error) is not None:
                # The events the chunk held before it were all taken first.
                await self._too_large(too_large)
            read = self._read
            if read is None:
                read = self._read = asyncio.ensure_future(anext(self._chunks))
            try:
                # Shielded: a caller timing out its wait must not kill the
                # connection; the next call picks up the same read.
                chunk = await asyncio.shield(read)
                self._read = None
                self._events.extend(self._parser.feed(chunk))
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if read.cancelled() and (task is None or not task.cancelling()):
                    # Not this reader cancelled: the read, under it, by
                    # aclose() (or a disconnect) from another task. The
                    # connection is gone; the iteration ends if closed.
                    raise _Lost("the stream was closed") from None
                raise
            except SseEventTooLarge as exc:
                self._read = None
                await self._too_large(exc)
            except StopAsyncIteration:
                self._read = None
                raise _Lost("the stream ended") from None
            except (httpx.HTTPError, httpx.StreamError, SseProtocolError) as exc:
                self._read = None
                raise _Lost(repr(exc)) from exc
        return self._events.popleft()

    async def _too_large(self, exc: SseEventTooLarge) -> NoReturn:
        """End the stream: an event past ``max_event_bytes`` (reconnecting
        would only fetch it again)."""
        error = MessageTooLargeError(str(exc))
        await self._close_failing(error)
        raise error from None

    async def _resync(self, crdt_id: str) -> None:
        # SSE has no way back to the server: a new request, at once (no backoff).
        self._connected = False
        await self._disconnect()

    async def _disconnect(self) -> None:
        response, self._response = self._response, None
        read, self._read = self._read, None
        if read is not None:
            read.cancel()
            # Collect its outcome so a failed read is not reported as unretrieved.
            read.add_done_callback(_retrieve)
        self._chunks = None
        self._events.clear()
        if response is not None:
            await response.aclose()


def _retrieve(future: asyncio.Future[bytes]) -> None:
    if not future.cancelled():
        future.exception()
