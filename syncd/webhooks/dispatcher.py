"""The webhook queue: the op path drops events in, a few workers deliver them.

The op path calls ``enqueue()``, which never awaits, blocks or raises: a slow
or dead receiver costs the op path one bounded-queue insert and nothing else.
When the queue (1024 slots) is full the event is dropped and
counted. Each worker takes one event at a time and tries it up to four times
(3 retries after 200, 400 and 800 ms), then drops it and counts it
(docs/webhooks.md#delivery).

Events are independent POSTs handled by several workers, so receivers may see
them out of order; ``seq`` and ``event_id`` in the payload let them sort and
dedupe.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import logging
import secrets
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from syncd.metrics import Metrics
from syncd.webhooks import client

log = logging.getLogger("syncd.webhooks")

# Events wait here; a new event finding it full is dropped (docs/webhooks.md#delivery).
QUEUE_SIZE = 1024
# Up to 3 retries after a failed attempt, with exponential backoff.
RETRY_DELAYS: tuple[float, ...] = (0.2, 0.4, 0.8)
# Concurrent deliveries. A few, so one stalled request does not hold up every
# event, and few enough that a flood of events cannot open many sockets.
WEBHOOK_WORKERS = 4
# TCP connect plus TLS handshake; a reachable receiver does this in milliseconds.
CONNECT_TIMEOUT = 2.0
# One attempt end to end. With 4 attempts, one event holds a worker at most
# 4 * 5 s + 1.4 s of backoff.
TOTAL_TIMEOUT = 5.0

# A flood of drops logs one warning per interval, not one line per event.
DROP_LOG_INTERVAL = 10.0

SIGNATURE_HEADER = "X-Service-Signature"

# The fields the caller must give; the dispatcher adds timestamp_ms and event_id.
_CALLER_FIELDS = ("ns", "crdt_id", "source", "seq", "op_type", "client_id")
# ``epoch``: the CRDT's life (docs/protocol.md), which a receiver needs to
# order by seq: a deleted id written to again starts over at seq 1.
# ``origin``: given when the op has one (its attribution,
# docs/data-model.md#origins; at most syncd.crdt.validate.ORIGIN_MAX_LEN
# characters, checked on the op path, so an event stays small).
# Each is absent from the payload when not given.
_OPTIONAL_FIELDS = ("epoch", "origin")


class PostFn(Protocol):
    """The shape of ``client.post``, injectable for tests."""

    async def __call__(
        self,
        url: str,
        body: bytes,
        headers: Sequence[tuple[str, str]],
        *,
        connect_timeout: float,
        total_timeout: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> int: ...


class _NoMetric:
    """Stands in for a prometheus child when the dispatcher has no Metrics."""

    def inc(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass


class _DropLog:
    """Drops of one kind counted in the log: the first of an interval
    (:data:`DROP_LOG_INTERVAL`) at once, the others of the interval in one
    line at its end (or at :meth:`flush`), so the log accounts for every drop
    without a line each. ``describe`` gives the line's words after the count."""

    def __init__(self, describe: Callable[[int], str]) -> None:
        self._describe = describe
        self._last = -DROP_LOG_INTERVAL
        self._unlogged = 0
        self._timer: asyncio.TimerHandle | None = None

    def count(self) -> None:
        self._unlogged += 1
        wait = self._last + DROP_LOG_INTERVAL - time.monotonic()
        if wait <= 0:
            self.flush()
        elif self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop (a test's bare enqueue): close() logs them
            self._timer = loop.call_later(wait, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._unlogged:
            return
        log.warning("webhooks: %s", self._describe(self._unlogged))
        self._last = time.monotonic()
        self._unlogged = 0


def _events(count: int) -> str:
    return f"{count} event" if count == 1 else f"{count} events"


def sign(secret: bytes, body: bytes) -> str:
    """The ``X-Service-Signature`` value: lowercase hex HMAC-SHA256 of the raw body."""
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


class WebhookDispatcher:
    """Queue and deliver webhook events to one URL.

    Use from the event loop's thread: ``start()`` once the loop runs,
    ``enqueue(event)`` from the op path, ``await close(drain_timeout)`` at
    shutdown. An empty ``secret`` counts as unset (no signature header).
    """

    def __init__(
        self,
        url: str,
        secret: str | None,
        *,
        metrics: Metrics | None,
        queue_size: int = QUEUE_SIZE,
        retry_delays: Sequence[float] = RETRY_DELAYS,
        connect_timeout: float = CONNECT_TIMEOUT,
        total_timeout: float = TOTAL_TIMEOUT,
        workers: int = WEBHOOK_WORKERS,
        ssl_context: ssl.SSLContext | None = None,
        post: PostFn = client.post,
    ) -> None:
        self._target = client.parse_url(url)  # ValueError for an unusable URL
        if queue_size < 1:
            raise ValueError("queue_size must be at least 1")
        if workers < 1:
            raise ValueError("workers must be at least 1")
        if any(d < 0 for d in retry_delays):
            raise ValueError("retry_delays must not be negative")
        self._url = url.strip()
        # The key is the secret's bytes as set: an environment value that is
        # not UTF-8 reaches Python with its bytes as surrogate escapes, which
        # a strict encode refuses (and the server would not start).
        self._key = secret.encode("utf-8", "surrogateescape") if secret else None
        self._queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue(maxsize=queue_size)
        self._retry_delays = tuple(retry_delays)
        self._connect_timeout = connect_timeout
        self._total_timeout = total_timeout
        self._worker_count = workers
        self._ssl_context = ssl_context
        self._post = post
        self._workers: list[asyncio.Task[None]] = []
        self._in_flight = 0
        self._closed = False
        self._cut_short = asyncio.Event()
        """Set by :meth:`cut_short`: close() waits for no delivery."""
        self._refused_log = _DropLog(self._describe_refused)
        """Events the full (or closed) queue refused."""
        self._failed_log = _DropLog(self._describe_failed)
        """Events dropped after their last attempt failed."""
        self._last_problem = ""
        """Why the last failed attempt failed, for the failed events' line."""
        # Unique across nodes and restarts: a random per-process prefix, then a counter.
        self._id_prefix = secrets.token_hex(8)
        self._counter = itertools.count(1)
        if metrics is not None:
            deliveries = metrics.webhook_deliveries_total
            self._m_ok: Any = deliveries.labels(result="ok")
            self._m_retry: Any = deliveries.labels(result="retry")
            self._m_failed: Any = deliveries.labels(result="failed")
            self._m_dropped: Any = metrics.webhook_dropped_total
            self._m_depth: Any = metrics.webhook_queue_depth
        else:
            self._m_ok = self._m_retry = self._m_failed = _NoMetric()
            self._m_dropped = self._m_depth = _NoMetric()

    @property
    def queue_depth(self) -> int:
        """Events waiting (not counting those a worker is delivering)."""
        return self._queue.qsize()

    @property
    def in_flight(self) -> int:
        """Events a worker holds right now (attempting or waiting to retry)."""
        return self._in_flight

    def start(self) -> None:
        """Spawn the workers on the running loop. Calling it again does nothing."""
        if self._closed:
            raise RuntimeError("webhook dispatcher is closed")
        if self._workers:
            return
        self._workers = [
            asyncio.create_task(self._work(), name=f"webhook-worker-{i}")
            for i in range(self._worker_count)
        ]
        log.info(
            "webhooks: delivering to %s with %d workers, queue of %d, signed=%s",
            self._target.safe_url,
            self._worker_count,
            self._queue.maxsize,
            self._key is not None,
        )

    def enqueue(self, event: dict[str, Any]) -> bool:
        """Queue one event; False when it was not queued. Never blocks or raises.

        ``event`` holds ns, crdt_id, source ("http", "ws" or "yjs"), seq,
        op_type and client_id, the CRDT's epoch, and the op's origin when it
        has one; timestamp_ms and event_id are filled in when missing.
        """
        try:
            if self._closed or self._queue.full():
                self._m_dropped.inc()
                self._refused_log.count()
                return False
            missing = [k for k in _CALLER_FIELDS if k not in event]
            if missing:
                log.error("webhooks: event without %s not sent", ", ".join(missing))
                return False
            event_id = event.get("event_id") or f"{self._id_prefix}-{next(self._counter)}"
            timestamp_ms = event.get("timestamp_ms")
            if timestamp_ms is None:
                timestamp_ms = time.time_ns() // 1_000_000
            payload = {
                "ns": event["ns"],
                "crdt_id": event["crdt_id"],
                "source": event["source"],
                "timestamp_ms": timestamp_ms,
                "seq": event["seq"],
                "op_type": event["op_type"],
                "client_id": event["client_id"],
                "event_id": event_id,
            }
            for key in _OPTIONAL_FIELDS:
                value = event.get(key)
                if value is not None:
                    payload[key] = value
            body = json.dumps(
                payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False
            ).encode()
            self._queue.put_nowait((str(event_id), body))
            self._m_depth.set(self._queue.qsize())
            return True
        except Exception:
            # The op already succeeded; a webhook problem must not turn it into an error.
            log.exception("webhooks: could not queue an event")
            return False

    def _describe_refused(self, count: int) -> str:
        why = "dispatcher closed" if self._closed else f"queue of {self._queue.maxsize} full"
        return f"{_events(count)} dropped ({why})"

    def _describe_failed(self, count: int) -> str:
        attempts = len(self._retry_delays) + 1
        return (
            f"{_events(count)} dropped after {attempts} attempts each to"
            f" {self._target.safe_url} (the last: {self._last_problem})"
        )

    async def close(self, drain_timeout: float) -> None:
        """Stop taking events, let the queue drain for up to ``drain_timeout``
        seconds, then cancel the workers. Events still waiting or in flight
        then are counted as dropped."""
        if self._closed:
            return
        # The queue's drops not logged yet, before the line of those closing refuses.
        self._refused_log.flush()
        self._closed = True
        if self._workers and (self._queue.qsize() or self._in_flight):
            joined = asyncio.ensure_future(self._queue.join())
            cut = asyncio.ensure_future(self._cut_short.wait())
            try:
                await asyncio.wait(
                    (joined, cut), timeout=drain_timeout, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                joined.cancel()
                cut.cancel()
        # Counted before cancelling, while nothing else can run.
        lost = self._queue.qsize() + self._in_flight
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        while not self._queue.empty():
            self._queue.get_nowait()
            self._queue.task_done()
        self._m_depth.set(0)
        self._failed_log.flush()
        if lost:
            self._m_dropped.inc(lost)
            log.warning(
                "webhooks: %s not delivered at shutdown%s",
                _events(lost),
                " (the drain was cut short by a stop signal)" if self._cut_short.is_set() else "",
            )

    def cut_short(self) -> None:
        """Another stop signal during the shutdown: :meth:`close` stops waiting
        for deliveries now, or does not start to (what is left is dropped and
        counted, as at the end of the drain)."""
        self._cut_short.set()

    async def _work(self) -> None:
        while True:
            event_id, body = await self._queue.get()
            self._in_flight += 1
            self._m_depth.set(self._queue.qsize())
            try:
                await self._deliver(event_id, body)
            except Exception:
                # A bug here must cost one event, never the worker.
                log.exception("webhooks: unexpected error delivering event %s", event_id)
            finally:
                self._in_flight -= 1
                self._queue.task_done()

    def _headers(self, body: bytes) -> list[tuple[str, str]]:
        headers = [("Content-Type", "application/json")]
        if self._key is not None:
            headers.append((SIGNATURE_HEADER, sign(self._key, body)))
        return headers

    async def _deliver(self, event_id: str, body: bytes) -> None:
        headers = self._headers(body)
        attempts = len(self._retry_delays) + 1
        for attempt in range(attempts):
            try:
                status = await self._post(
                    self._url,
                    body,
                    headers,
                    connect_timeout=self._connect_timeout,
                    total_timeout=self._total_timeout,
                    ssl_context=self._ssl_context,
                )
            except Exception as exc:
                problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            else:
                if 200 <= status < 300:
                    self._m_ok.inc()
                    return
                problem = f"status {status}"
            if attempt + 1 < attempts:
                self._m_retry.inc()
                delay = self._retry_delays[attempt]
                # The delay in the line: what was scheduled, which the
                # arrival times (late on a busy machine) cannot show.
                log.debug(
                    "webhooks: event %s attempt %d to %s failed (%s), retrying in %d ms",
                    event_id,
                    attempt + 1,
                    self._target.safe_url,
                    problem,
                    round(delay * 1000),
                )
                await asyncio.sleep(delay)
            else:
                self._m_failed.inc()
                self._m_dropped.inc()
                # Counted, not a line each: a receiver that fails every
                # request would otherwise write one per event.
                log.debug("webhooks: event %s dropped (%s)", event_id, problem)
                self._last_problem = problem
                self._failed_log.count()
