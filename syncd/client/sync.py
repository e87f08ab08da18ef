"""The blocking client: the async client's API for code without an event loop.

HTTP goes through ``httpx.Client``, sharing the request and answer handling
and the op helpers with the async client. ``subscribe`` and ``events`` run the
async streams on a private event loop in a background thread and hand the
deltas over through a bounded queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

import httpx

from syncd.client._http import DEFAULT_TIMEOUT_S, ClientCore, default_tls, json_answer
from syncd.client.aio import NOT_FOUND, AsyncClient
from syncd.client.config import ClientConfig
from syncd.client.errors import ServiceError, TransportError
from syncd.client.helpers import OpHelpers
from syncd.client.ops import Op
from syncd.client.retry import RETRY_ATTEMPTS, new_op_id, with_op_ids, with_retries_sync
from syncd.client.stream import EventStream, Subscription, check_ids
from syncd.client.token import wall_clock_ms

Answer = dict[str, Any]

STREAM_BUFFER: Final = 1000
"""Deltas a blocking stream holds unread; past that the background reader
waits (the WebSocket then applies backpressure to the service)."""

STREAM_JOIN_S: Final = 10.0
"""How long ``close`` waits for the background thread to finish."""


@dataclass(frozen=True, slots=True)
class Deadline:
    """The end of a :meth:`Client.deadline` block, a :func:`time.monotonic` time."""

    at: float

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def expired(self) -> bool:
        return self.remaining() <= 0


_deadline: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "syncd_client_deadline", default=None
)
"""The innermost :meth:`Client.deadline` in force (per thread: each thread
has its own context)."""


class Client(OpHelpers[Answer]):
    """``Client(base_url, token, namespace)``: the blocking twin of :class:`AsyncClient`."""

    def __init__(
        self,
        base_url: str,
        token: str,
        namespace: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        clock_ms: Callable[[], int] = wall_clock_ms,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.core = ClientCore(ClientConfig(base_url, token, namespace), clock_ms)
        self.config = self.core.config
        self.timeout = timeout
        self._clock_ms = clock_ms
        self._http = httpx.Client(
            timeout=timeout, headers=self.core.headers, transport=transport, verify=default_tls()
        )

    @classmethod
    def from_config(cls, config: ClientConfig | dict[str, Any], **options: Any) -> Client:
        if not isinstance(config, ClientConfig):
            config = ClientConfig.from_mapping(config)
        return cls(config.base_url, config.token, config.namespace, **options)

    @property
    def client_id(self) -> int:
        return self.core.client_id

    @property
    def namespace(self) -> str:
        return self.config.namespace

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @contextlib.contextmanager
    def deadline(self, seconds: float) -> Iterator[Deadline]:
        """Every request and every wait between retries made in this block,
        in this thread, ends within ``seconds`` from now (or by an outer
        block's deadline, when earlier); past it they raise TimeoutError.

        Each request's timeout is cut to the time left, so a stalled service
        holds the block ``seconds`` at most (an answer trickling in a few
        bytes at a time can take one more such timeout); the blocking
        twin of wrapping async calls in ``asyncio.timeout``."""
        ends = Deadline(time.monotonic() + seconds)
        outer = _deadline.get()
        if outer is not None and outer.at < ends.at:
            ends = outer
        token = _deadline.set(ends)
        try:
            yield ends
        finally:
            _deadline.reset(token)

    def _send(
        self, method: str, url: str, *, params: dict[str, str] | None = None, json: Any = None
    ) -> httpx.Response:
        self.core.check_token()
        ends = _deadline.get()
        timeout: Any = httpx.USE_CLIENT_DEFAULT
        if ends is not None:
            left = ends.remaining()
            if left <= 0:
                raise TimeoutError(f"{method} {url}: the deadline passed before it was sent")
            timeout = min(self.timeout, left)
        try:
            return self._http.request(method, url, params=params, json=json, timeout=timeout)
        except httpx.TransportError as exc:
            if ends is not None and ends.expired():
                raise TimeoutError(f"{method} {url}: the deadline passed: {exc!r}") from exc
            raise TransportError(f"{method} {url}: {exc!r}") from exc

    def fetch(self, crdt_id: str, *, crdt_format: bool = False) -> Answer:
        params = {"format": "crdt"} if crdt_format else None
        answer: Answer = json_answer(
            self._send("GET", self.config.crdt_url(crdt_id), params=params)
        )
        return answer

    def read(self, crdt_id: str) -> Answer | None:
        try:
            return self.fetch(crdt_id)
        except ServiceError as error:
            if error.status == NOT_FOUND:
                return None
            raise

    def read_state(self, crdt_id: str) -> Answer | None:
        try:
            return self.fetch(crdt_id, crdt_format=True)
        except ServiceError as error:
            if error.status == NOT_FOUND:
                return None
            raise

    def apply(
        self,
        crdt_id: str,
        body: Op | Sequence[Op],
        *,
        return_state: bool = False,
        origin: str | None = None,
    ) -> Answer:
        url, params, payload = self.core.ops_request(crdt_id, body, return_state, origin)
        answer: Answer = json_answer(self._send("POST", url, params=params, json=payload))
        return answer

    def apply_retrying(
        self,
        crdt_id: str,
        body: Op | Sequence[Op],
        *,
        return_state: bool = False,
        attempts: int = RETRY_ATTEMPTS,
        op_id: str | None = None,
        origin: str | None = None,
    ) -> Answer:
        key = op_id or new_op_id()
        # Once, before the first attempt: every attempt sends the same ops with
        # the same op_ids (an iterator of ops would be empty on a retry).
        sent = with_op_ids(body, key)
        return with_retries_sync(
            lambda _key: self.apply(crdt_id, sent, return_state=return_state, origin=origin),
            op_id=key,
            attempts=attempts,
            deadline=current_deadline(),
        )

    def history(
        self,
        crdt_id: str,
        *,
        before: int | None = None,
        limit: int | None = None,
        client_id: int | None = None,
        origin: str | None = None,
    ) -> Answer:
        params = self.core.history_params(before, limit, client_id, origin)
        answer: Answer = json_answer(
            self._send("GET", self.config.crdt_url(crdt_id, "/history"), params=params)
        )
        return answer

    def at(self, crdt_id: str, seq: int, *, crdt_format: bool = False) -> Answer:
        params = self.core.at_params(seq, crdt_format)
        answer: Answer = json_answer(
            self._send("GET", self.config.crdt_url(crdt_id), params=params)
        )
        return answer

    def restore(self, crdt_id: str, seq: int, *, op_id: str | None = None) -> Answer:
        body = self.core.restore_body(seq, op_id)
        answer: Answer = json_answer(
            self._send("POST", self.config.crdt_url(crdt_id, "/restore"), json=body)
        )
        return answer

    def revert(
        self,
        crdt_id: str,
        *,
        client_id: int | None = None,
        origin: str | None = None,
        since_seq: int | None = None,
        until_seq: int | None = None,
        op_id: str | None = None,
    ) -> Answer:
        body = self.core.revert_body(client_id, origin, since_seq, until_seq, op_id)
        answer: Answer = json_answer(
            self._send("POST", self.config.crdt_url(crdt_id, "/revert"), json=body)
        )
        return answer

    def list_crdts(
        self, *, prefix: str = "", limit: int | None = None, cursor: str | None = None
    ) -> Answer:
        params = self.core.list_params(prefix, limit, cursor)
        answer: Answer = json_answer(
            self._send("GET", f"{self.config.namespace_url}/crdts", params=params)
        )
        return answer

    def delete_crdt(self, crdt_id: str) -> None:
        json_answer(self._send("DELETE", self.config.crdt_url(crdt_id)))

    def me(self) -> Answer:
        answer: Answer = json_answer(self._send("GET", f"{self.config.namespace_url}/tokens/me"))
        return answer

    def subscribe(self, ids: Iterable[str], **options: Any) -> BlockingStream:
        """Deltas of ``ids`` over a resuming WebSocket, as a blocking iterator."""
        check_ids(ids)
        id_list = list(ids)
        return BlockingStream(self._async_client, lambda c: c.subscribe(id_list, **options))

    def events(self, crdt_id: str, **options: Any) -> BlockingStream:
        """Deltas of one CRDT over resuming SSE, as a blocking iterator."""
        return BlockingStream(self._async_client, lambda c: c.events(crdt_id, **options))

    def _async_client(self) -> AsyncClient:
        config = self.config
        return AsyncClient(
            config.base_url,
            config.token,
            config.namespace,
            timeout=self.timeout,
            clock_ms=self._clock_ms,
        )


def current_deadline() -> float | None:
    """The :func:`time.monotonic` end of the :meth:`Client.deadline` block in
    force in this thread, if any (for :func:`with_retries_sync`)."""
    ends = _deadline.get()
    return None if ends is None else ends.at


@dataclass(frozen=True, slots=True)
class _End:
    error: BaseException | None


class BlockingStream:
    """An async delta stream run on a background thread; iterate it, then ``close()``."""

    def __init__(
        self,
        make_client: Callable[[], AsyncClient],
        open_stream: Callable[[AsyncClient], Any],
        buffer: int = STREAM_BUFFER,
    ) -> None:
        self._queue: queue.Queue[dict[str, Any] | _End] = queue.Queue(buffer)
        self._make_client = make_client
        self._open_stream = open_stream
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._started = threading.Event()
        self._open_error: Exception | None = None
        self._stream: Subscription | EventStream | None = None
        self._ended = False
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="syncd-stream", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._open_error is not None:
            # Bad arguments (no ids, an unknown option): raised here, as the
            # async client raises them when the stream is made.
            self._thread.join()
            self._ended = True
            raise self._open_error

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        error: BaseException | None = None
        client: AsyncClient | None = None
        try:
            client = self._make_client()
            opened = self._open_stream(client)
        except Exception as exc:
            self._open_error = exc
            if client is not None:
                await client.aclose()
            self._started.set()
            return
        self._started.set()
        try:
            async with opened as stream:
                self._stream = stream
                async for delta in stream:
                    await asyncio.to_thread(self._queue.put, delta)
        except asyncio.CancelledError:
            pass
        except Exception as exc:
            error = exc
        finally:
            await client.aclose()
            self._put_end(error)

    def _put_end(self, error: BaseException | None) -> None:
        # Behind the deltas still unread, as each delta waits for room: a
        # slow reader gets every one of them, then the end. Only once close()
        # was called (nobody will read them) is room made by dropping some.
        end = _End(error)
        while not self._closing.is_set():
            try:
                self._queue.put(end, timeout=0.05)
                return
            except queue.Full:
                continue
        while True:
            try:
                self._queue.put_nowait(end)
                return
            except queue.Full:
                with contextlib.suppress(queue.Empty):
                    self._queue.get_nowait()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        return self.next()

    def next(self, timeout: float | None = None) -> dict[str, Any]:
        """The next delta; StopIteration once closed, the stream's error if it failed,
        ``queue.Empty`` after ``timeout`` seconds without one."""
        if self._ended:
            raise StopIteration
        item = self._queue.get(timeout=timeout)
        if isinstance(item, _End):
            self._ended = True
            if item.error is not None:
                raise item.error
            raise StopIteration
        return item

    def is_synced(self, crdt_id: str) -> bool:
        """The async stream's ``is_synced``: whether ``crdt_id``'s start has
        all arrived since it was last (re)subscribed (the service's ``synced``
        message came; false again from a disconnect until the next one).
        False before the stream has opened. The loop thread sets it as it
        reads the message, before the deltas after it are queued, so once
        ``next()`` has returned a delta that followed the start, it is true
        (until a disconnect).
        A set membership test, safe to make from this thread."""
        stream = self._stream
        return stream is not None and stream.is_synced(crdt_id)

    def close(self) -> None:
        self._closing.set()
        loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(task.cancel)
        # A put waiting on a full queue holds the thread: drain so it can finish.
        deadline = time.monotonic() + STREAM_JOIN_S
        while self._thread.is_alive() and time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                self._queue.get(timeout=0.05)
            self._thread.join(0.05)
        self._ended = True
        # The drain above may have taken the end: a reader in another thread
        # that went into next() meanwhile would wait for ever. Wake it.
        self._put_end(None)

    def __enter__(self) -> BlockingStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
