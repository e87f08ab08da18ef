"""One WebSocket connection after the upgrade: frames in, messages, replies and deltas out.

Theory of operation
-------------------
The HTTP connection hands its transport over with the bytes it had already
read; from then on this :class:`Session` is the transport's protocol. Bytes go
to the frame layer (:mod:`syncd.ws.framing`, wsproto underneath); each whole
message is decoded (:mod:`syncd.ws.codec`) and handled:

- ``op``: the token's expiry and rate are checked at once, then the op goes
  through the same service as HTTP ops (auth, engine, durable store, webhooks
  with source ``ws``) in a task of its own. Tasks start in arrival order, and
  the engine applies an op before the task first waits, so ops apply in order
  while many wait for the same group commit. Their answers (``ack`` or
  ``error``) go out strictly in arrival order through one queue, each once its
  own op is durable.
- ``subscribe`` / ``unsubscribe``: a :class:`~syncd.ws.subscription.WsSubscription`
  joins or leaves the hub. The hub hands it the delta's frame bytes, shared by
  every subscriber; they are queued here and written by the app's
  :class:`~syncd.ws.flusher.Flusher`, one send per connection per flush. Any
  other output written while frames are queued goes behind them, so the
  client sees everything in the order it was produced.
- ``ping``: ``pong``. Protocol-level pings are answered by the frame layer.

Keepalive: a peer silent for ``SERVICE_WS_PING_S`` gets a protocol ping; if
nothing at all arrives for as long again, we close with 1011. Any bytes count
as life (a pong, or anything else), so a busy client is never pinged. One
timer per connection, re-armed from the time of the last read.

Replies go in the encoding of the message they answer (binary msgpack or
JSON text); a malformed message gets an ``error`` reply and the connection
stays up. A message over the body limit closes with 1009, a protocol violation
with 1002.

Closing: nothing but the close frame is sent once closing starts. When we
close (1009, shutdown's 1001) we send our close frame and wait up to
:data:`CLOSE_TIMEOUT_S` for the peer's; when the peer closes first we answer
and close the transport. A transport that will not finish closing is aborted
after the same timeout.

Backpressure: while the transport's buffer is over its high-water mark (the
subscriber bound), or :data:`MAX_INFLIGHT_OPS` ops await their answers, we
stop reading from the client. When the transport drains, subscriptions that
were skipped meanwhile get a fresh snapshot.

Presence: each ``presence`` CRDT this connection wrote an ``update`` to gets a
``leave`` (same principal, through the service: durable and broadcast) once
the connection is gone and its in-flight ops are done.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

from syncd.catchup import initial_deltas
from syncd.crdt.types import crdt_class
from syncd.errors import ApiError, bad_request
from syncd.ids import check_crdt_id
from syncd.ws.codec import MessageLimits, decode, encode
from syncd.ws.flusher import Flusher
from syncd.ws.framing import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL_ERROR,
    Failed,
    FrameLayer,
    Message,
    PeerClosed,
    Reply,
)
from syncd.ws.subscription import WsSubscription

if TYPE_CHECKING:
    from syncd.auth.authenticator import Authenticator, Principal
    from syncd.config import Settings
    from syncd.crdt.engine import ApplyResult, Engine
    from syncd.http.protocol import ServerContext
    from syncd.hub import Hub
    from syncd.metrics import Metrics
    from syncd.service import CrdtService
    from syncd.store.base import Store

log = logging.getLogger("syncd.ws")

CLOSE_TIMEOUT_S: Final = 5.0
KEEPALIVE_LATE_SHARE: Final = 0.25
"""A keepalive timer that fires later than this share of the ping interval
found the loop stalled, not the peer silent: it looks again after as long."""
"""How long we wait for the peer's close frame after sending ours, and for a
closing transport to flush, before dropping the connection: long enough for a
live client on a slow link, short enough that dead peers do not pile up."""

MAX_INFLIGHT_OPS: Final = 1024
"""Op messages one connection may have awaiting their answers; past it we stop
reading. Enough to fill many group commits when a client pipelines, while the
memory of the waiting ops stays bounded."""

RESUME_INFLIGHT_OPS: Final = MAX_INFLIGHT_OPS // 2
"""Reading resumes once this few remain, so it does not flap per op."""

LOW_WATER_DIVISOR: Final = 4
"""The transport's low-water mark is the subscriber bound over this: a drained
connection has room for a snapshot and the deltas that follow it."""

COALESCE_MAX_BYTES: Final = 64 * 1024
"""Queued broadcast bytes that are flushed at once instead of at the flusher's
next pass: a send this size is already cheap per byte, and the queue (which
the subscriber bound does not see) stays small."""

_PONG: Final = {"kind": "pong"}

# Tasks nobody awaits (presence leaves, replays) must be referenced somewhere,
# or the loop may garbage-collect them half-way.
_background: set[asyncio.Task[Any]] = set()


def _spawn(coro: Any) -> asyncio.Task[Any]:
    task = asyncio.get_running_loop().create_task(coro)
    _background.add(task)
    task.add_done_callback(_background.discard)
    return task


async def wait_background(timeout: float) -> None:
    """Let closed sessions finish their presence leaves (graceful shutdown)."""
    if _background:
        await asyncio.wait(list(_background), timeout=timeout)


class _Answer:
    """The answer to one op message, once its op is durable (or refused)."""

    __slots__ = ("data", "task")

    def __init__(self) -> None:
        self.data: bytes | None = None
        # Referenced here: the loop holds running tasks only weakly.
        self.task: asyncio.Task[None] | None = None


class _Staged:
    """An op message waiting for its run's task to apply it (see Session._on_op)."""

    __slots__ = ("answer", "binary", "body", "crdt_id", "ref")

    def __init__(self, answer: _Answer, crdt_id: str, body: Any, ref: Any, binary: bool) -> None:
        self.answer = answer
        self.crdt_id = crdt_id
        self.body = body
        self.ref = ref
        self.binary = binary


def _ack(ref: Any, result: ApplyResult, binary: bool) -> bytes:
    ack: dict[str, Any] = {"kind": "ack", "ref": ref, "seq": result.seq}
    if result.extra:
        ack.update(result.extra)
    if result.duplicate:
        ack["duplicate"] = True
    return encode(ack, binary)


_INTERNAL: Final = ApiError(500, "internal", "internal error")


def error_message(ref: Any, exc: ApiError, crdt_id: str | None = None) -> dict[str, Any]:
    """The ``error`` reply for ``exc``; ``ref`` and ``id`` when known."""
    message: dict[str, Any] = {"kind": "error"}
    if ref is not None:
        message["ref"] = ref
    if crdt_id is not None:
        message["id"] = crdt_id
    message["error"] = exc.code
    message["message"] = exc.message
    for name, value in exc.headers:
        if name.lower() == "retry-after" and value.isascii() and value.isdigit():
            message["retry_after"] = int(value)
    return message


def _ref_of(message: dict[str, Any]) -> Any:
    ref = message.get("ref")
    return ref if type(ref) is str or type(ref) is int else None


def _id_field(message: dict[str, Any]) -> str:
    crdt_id = message.get("id")
    if type(crdt_id) is not str:
        raise bad_request("id: a CRDT id string is required")
    return check_crdt_id(crdt_id)


@dataclass(frozen=True)
class SessionContext:
    """What every WebSocket session uses, wired once by app.py."""

    auth: Authenticator
    engine: Engine
    store: Store
    hub: Hub
    metrics: Metrics
    service: CrdtService
    settings: Settings
    server: Callable[[], ServerContext | None]
    """The HTTP server's shared state (connection count, shutdown), once it runs."""


class Session(asyncio.Protocol):
    def __init__(
        self,
        app: SessionContext,
        transport: asyncio.Transport,
        trailing: bytes,
        ns: str,
        principal: Principal,
        flusher: Flusher,
    ) -> None:
        settings = app.settings
        self._app = app
        self._loop = asyncio.get_running_loop()
        self.transport = transport
        self.ns = ns
        self.principal = principal
        self._frames = FrameLayer(settings.max_body_bytes)
        self._limits = MessageLimits(settings.max_body_bytes, settings.json_max_depth)
        self._bound = settings.subscriber_buffer_bytes
        self._max_subscriptions = settings.max_subscriptions
        self.subscriptions: dict[str, WsSubscription] = {}
        self._lagging: list[WsSubscription] = []
        self._flusher = flusher
        self._out: list[bytes] = []
        """Broadcast frames (and what followed them) waiting for the flusher."""
        self._out_bytes = 0
        self._replies: deque[bytes | _Answer] = deque()
        """Answers owed, in arrival order: ready bytes, or ops still running."""
        self._inflight = 0
        self._run: list[_Staged] = []
        """Op messages of the current read, applied together by one task."""
        self._stages = app.service.stages
        self._presence: dict[str, Mapping[str, Any]] = {}
        """CRDT id -> the op to send for it when this connection goes away."""
        self.can_send = True
        """False once closing started: then nothing but close frames go out."""
        self._read_paused = False
        self._write_paused = False
        self._held = False
        self._gone = False
        self._timer: asyncio.TimerHandle | None = None
        self._ping_s = settings.ws_ping_s
        self._last_read = self._loop.time()
        self._pinged = False
        self._ping_sent = 0.0
        self._keepalive: asyncio.TimerHandle | None = None
        self._keepalive_due = 0.0
        self._arm_keepalive(self._last_read + self._ping_s)
        transport.set_write_buffer_limits(high=self._bound, low=self._bound // LOW_WATER_DIVISOR)
        ctx = app.server()
        if ctx is not None:
            ctx.other_connections.add(self)
        app.metrics.ws_connections_active.inc()
        if trailing:
            # Parsed on the next loop pass, once the transport is ours; bytes
            # that arrive before then queue behind these in the frame layer.
            self._frames.feed(trailing)
            self._loop.call_soon(self._process)

    # -- asyncio.Protocol -------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Not called: the transport is handed over already connected."""

    def data_received(self, data: bytes) -> None:
        self._last_read = self._loop.time()
        frames = self._frames
        if not frames.reading:
            return
        frames.feed(data)
        self._process()

    def eof_received(self) -> bool | None:
        # The peer will send nothing more, not even a close frame: done.
        self.can_send = False
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._gone:
            return
        self._gone = True
        self.can_send = False
        self._cancel_timer()
        self._stop_keepalive()
        app = self._app
        ctx = app.server()
        if ctx is not None:
            ctx.other_connections.discard(self)
        app.metrics.ws_connections_active.dec()
        for subscription in list(self.subscriptions.values()):
            self._drop_subscription(subscription)
        self._lagging.clear()
        self._out.clear()
        self._out_bytes = 0
        inflight = [r.task for r in self._replies if isinstance(r, _Answer) and r.task is not None]
        self._replies.clear()
        self._inflight = 0
        if self._presence or inflight:
            _spawn(self._leave_presence(inflight))

    def pause_writing(self) -> None:
        self._write_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._lagging:
            lagging, self._lagging = self._lagging, []
            engine = self._app.engine
            for subscription in lagging:
                subscription.resync(engine)
        self._process()  # messages held back while paused
        self._maybe_resume_reading()

    # -- output ------------------------------------------------------------

    def push(self, data: bytes, subscription: WsSubscription) -> bool:
        """Queue a broadcast frame for the flusher (see WsSubscription.deliver)."""
        if not self.can_send:
            return False
        if self._write_paused:
            # The transport's high-water mark is the bound: paused means the
            # peer has left more than that unread (and not yet drained to the
            # low-water mark), known without asking the transport per delta.
            subscription.lag = True
            self._lagging.append(subscription)
            return False
        out = self._out
        if not out:
            self._flusher.mark(self)
        out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes >= COALESCE_MAX_BYTES:
            self.flush()  # enough to be worth a send of its own
        return True

    def send(self, data: bytes) -> None:
        """Write now, unless frames are queued: then behind them, keeping order."""
        if not self.can_send:
            return
        if self._out:
            self._out.append(data)
            self._out_bytes += len(data)
            if self._out_bytes >= COALESCE_MAX_BYTES:
                self.flush()  # so the transport sees it and can pause us
        else:
            self._write(data)

    def flush(self) -> None:
        out = self._out
        if not out:
            return
        self._out = []
        self._out_bytes = 0
        if not self.can_send:
            return
        self._write(out[0] if len(out) == 1 else b"".join(out))

    # -- server ------------------------------------------------------------

    def shutdown(self) -> None:
        """The server is stopping: close with 1001 (going away)."""
        self.close(CLOSE_GOING_AWAY, "server shutting down")

    def close(self, code: int, reason: str = "") -> None:
        """Start the closing handshake: our close frame, then wait for the peer's."""
        if self._gone:
            return
        self.flush()  # what was queued goes before the close frame
        self.can_send = False
        self._stop_keepalive()
        data = self._frames.close(code, reason)
        if data:
            self._write(data)
        if self._frames.reading:
            # Read on, whatever held reading back, to see the peer's answer.
            self._held = False
            self._resume_reading()
            self._arm_timer()
        else:
            self._finish()

    # -- reading -----------------------------------------------------------

    def _process(self) -> None:
        if self._gone or self._held:
            return
        try:
            self._read_events()
        finally:
            if self._run:
                self._start_run()

    def _read_events(self) -> None:
        for event in self._frames.events():
            kind = type(event)
            if kind is Message:
                self._on_message(cast(Message, event).data)
                if self._inflight >= MAX_INFLIGHT_OPS:
                    self._held = True
                    self._pause_reading()
                    return
                if self._write_paused:
                    # The peer is not reading: answering the rest of what it
                    # sent (each subscribe a whole snapshot) would buffer
                    # without bound. resume_writing() carries on.
                    return
            elif kind is Reply:
                self.send(cast(Reply, event).data)
                if self._write_paused:
                    return
            elif kind is PeerClosed:
                self._on_peer_close(cast(PeerClosed, event))
                return
            else:
                failed = cast(Failed, event)
                self.close(failed.code, failed.reason)
                if self._frames.reading:
                    # Over-size only: read on (dropping data) for the peer's close.
                    self._process()
                return

    def _on_peer_close(self, event: PeerClosed) -> None:
        self.can_send = False
        self._out.clear()  # the peer is leaving: no data after its close
        self._out_bytes = 0
        data = self._frames.answer_close(event)
        if data:
            self._write(data)
        self._finish()

    def _on_message(self, data: bytes | str) -> None:
        binary = type(data) is bytes
        try:
            message = decode(data, self._limits)
        except ApiError as exc:
            self._reply(encode(error_message(None, exc), binary))
            return
        kind = message.get("kind")
        try:
            if kind == "op":
                self._on_op(message, binary)
            elif kind == "subscribe":
                self._on_subscribe(message, binary)
            elif kind == "unsubscribe":
                self._on_unsubscribe(message)
            elif kind == "ping":
                ref = _ref_of(message)
                self._reply(encode(_PONG if ref is None else {"kind": "pong", "ref": ref}, binary))
            else:
                raise bad_request(f"kind: {kind!r} is not one of op, subscribe, unsubscribe, ping")
        except ApiError as exc:
            crdt_id = message.get("id") if kind == "subscribe" else None
            self._reply(
                encode(
                    error_message(_ref_of(message), exc, crdt_id if type(crdt_id) is str else None),
                    binary,
                )
            )

    # -- ops -----------------------------------------------------------------

    def _on_op(self, message: dict[str, Any], binary: bool) -> None:
        ref = message.get("ref")
        if type(ref) is not str and type(ref) is not int:
            raise bad_request("ref: a string or integer is required")
        crdt_id = _id_field(message)
        if "op" not in message:
            raise bad_request("op: an op object or an array of ops is required")
        auth = self._app.auth
        auth.check_expiry(self.principal)
        auth.rate_check(self.principal)
        answer = _Answer()
        self._replies.append(answer)
        self._inflight += 1
        if self._stages:
            # Applied with the rest of this read's ops, by one task: one store
            # append and one wait for the group commit, not one of each per op.
            self._run.append(_Staged(answer, crdt_id, message["op"], ref, binary))
        else:
            answer.task = self._loop.create_task(
                self._apply(answer, crdt_id, message["op"], ref, binary)
            )

    def _start_run(self) -> None:
        run, self._run = self._run, []
        task = self._loop.create_task(self._apply_run(run))
        for staged in run:
            staged.answer.task = task

    async def _apply_run(self, run: list[_Staged]) -> None:
        """Apply a read's ops in arrival order, persist their records at once,
        answer each (ack or its own error) once they are durable."""
        service = self._app.service
        ns = self.ns
        principal = self.principal
        applied: list[tuple[_Staged, ApplyResult]] = []
        records: list[dict[str, Any]] = []
        try:
            for staged in run:
                try:
                    result = service.stage(ns, staged.crdt_id, staged.body, principal)
                except ApiError as exc:
                    staged.answer.data = encode(error_message(staged.ref, exc), staged.binary)
                except Exception:
                    log.exception("op on %s/%s failed", ns, staged.crdt_id)
                    staged.answer.data = encode(error_message(staged.ref, _INTERNAL), staged.binary)
                else:
                    applied.append((staged, result))
                    if result.records:
                        records += result.records
            if applied:
                try:
                    # Duplicates only (no records) still wait: see apply_ops.
                    await service.persist(records, "ws")
                except ApiError as exc:
                    for staged, _ in applied:
                        staged.answer.data = encode(error_message(staged.ref, exc), staged.binary)
                except Exception:
                    log.exception("ops on %s failed", ns)
                    for staged, _ in applied:
                        staged.answer.data = encode(
                            error_message(staged.ref, _INTERNAL), staged.binary
                        )
                else:
                    for staged, result in applied:
                        self._note_presence(staged.crdt_id, result)
                        staged.answer.data = _ack(staged.ref, result, staged.binary)
        finally:
            for staged in run:
                answer = staged.answer
                if answer.data is None:
                    answer.data = b""  # cancelled (the loop is going away): owe nothing
                answer.task = None
            self._flush_replies()

    async def _apply(
        self, answer: _Answer, crdt_id: str, body: Any, ref: Any, binary: bool
    ) -> None:
        try:
            result = await self._app.service.apply_ops(self.ns, crdt_id, body, self.principal, "ws")
        except ApiError as exc:
            answer.data = encode(error_message(ref, exc), binary)
        except Exception:
            log.exception("op on %s/%s failed", self.ns, crdt_id)
            answer.data = encode(error_message(ref, _INTERNAL), binary)
        else:
            self._note_presence(crdt_id, result)
            answer.data = _ack(ref, result, binary)
        finally:
            if answer.data is None:
                answer.data = b""  # cancelled (the loop is going away): owe nothing
            answer.task = None
            # From here rather than as a done callback: no extra loop pass per op.
            self._flush_replies()

    def _note_presence(self, crdt_id: str, result: ApplyResult) -> None:
        """Remember the CRDTs whose type wants an op from this connection when
        it goes away (``Crdt.DISCONNECT_OP``: presence's leave)."""
        for record in result.records:
            on_disconnect = crdt_class(record["type"]).DISCONNECT_OP
            if on_disconnect is None:
                return
            if record["op"].get("op") == on_disconnect["op"]:
                self._presence.pop(crdt_id, None)
            else:
                self._presence[crdt_id] = on_disconnect

    def _reply(self, data: bytes) -> None:
        if self._replies:
            self._replies.append(data)  # after the answers still owed
        else:
            self.send(data)

    def _flush_replies(self) -> None:
        replies = self._replies
        out: list[bytes] = []
        while replies:
            head = replies[0]
            if type(head) is bytes:
                out.append(head)
            else:
                data = cast(_Answer, head).data
                if data is None:
                    break
                self._inflight -= 1
                out.append(data)
            replies.popleft()
        if out:
            # One write for a run of answers: pipelined acks cost one send.
            self.send(out[0] if len(out) == 1 else b"".join(out))
        if self._held and self._inflight <= RESUME_INFLIGHT_OPS:
            self._held = False
            self._process()
            self._maybe_resume_reading()

    # -- subscriptions ---------------------------------------------------------

    def _on_subscribe(self, message: dict[str, Any], binary: bool) -> None:
        crdt_id = _id_field(message)
        since = message.get("since")
        if since is not None and (type(since) is not int or since < 0):
            raise bad_request("since: must be a non-negative integer")
        epoch = message.get("epoch")
        if epoch is not None and type(epoch) is not str:
            raise bad_request("epoch: must be a string")
        auth = self._app.auth
        auth.check_expiry(self.principal)
        auth.check_read(self.principal, crdt_id)
        held = self.subscriptions.get(crdt_id)
        if held is not None:
            self._drop_subscription(held)  # subscribing again starts afresh
        elif len(self.subscriptions) >= self._max_subscriptions:
            raise bad_request(f"at most {self._max_subscriptions} subscriptions per connection")
        app = self._app
        subscription = WsSubscription(self, self.ns, crdt_id, binary)
        self.subscriptions[crdt_id] = subscription
        # Join the hub before reading the state: deltas made meanwhile wait
        # in the subscription, so none falls between the two.
        app.hub.subscribe(self.ns, crdt_id, subscription)
        app.metrics.subscriptions_active.inc()
        if since is None:
            subscription.start([app.engine.snapshot_delta(self.ns, crdt_id)])
        else:
            _spawn(self._start_replay(subscription, since, epoch))

    async def _start_replay(
        self, subscription: WsSubscription, since: int, epoch: str | None
    ) -> None:
        try:
            app = self._app
            initial = await initial_deltas(
                app.engine, app.store, self.ns, subscription.crdt_id, since, epoch
            )
        except Exception as exc:
            if subscription.active:
                log.exception("replay for %s/%s failed", self.ns, subscription.crdt_id)
                self._drop_subscription(subscription)
                error = ApiError(503, "unavailable", "could not read the CRDT's history")
                if isinstance(exc, ApiError):
                    error = exc
                self._reply(
                    encode(error_message(None, error, subscription.crdt_id), subscription.binary)
                )
            return
        subscription.start(initial)

    def _on_unsubscribe(self, message: dict[str, Any]) -> None:
        crdt_id = _id_field(message)
        subscription = self.subscriptions.get(crdt_id)
        if subscription is not None:
            self._drop_subscription(subscription)

    def _drop_subscription(self, subscription: WsSubscription) -> None:
        if not subscription.active:
            return
        subscription.active = False
        subscription.pending = None
        app = self._app
        app.hub.unsubscribe(self.ns, subscription.crdt_id, subscription)
        app.metrics.subscriptions_active.dec()
        if self.subscriptions.get(subscription.crdt_id) is subscription:
            del self.subscriptions[subscription.crdt_id]
        if subscription.lag:
            subscription.lag = False
            self._lagging.remove(subscription)

    # -- presence ---------------------------------------------------------

    async def _leave_presence(self, inflight: list[asyncio.Task[None]]) -> None:
        if inflight:
            await asyncio.wait(inflight)
        service = self._app.service
        for crdt_id, leave in sorted(self._presence.items()):
            try:
                await service.apply_ops(self.ns, crdt_id, dict(leave), self.principal, "ws")
            except ApiError as exc:
                log.info("presence leave on %s/%s refused: %s", self.ns, crdt_id, exc.message)
            except Exception:
                log.exception("presence leave on %s/%s failed", self.ns, crdt_id)
        self._presence.clear()

    # -- plumbing ----------------------------------------------------------

    def _write(self, data: bytes) -> None:
        try:
            self.transport.write(data)
        except RuntimeError:
            # uvloop refuses writes once the socket failed, a moment before
            # connection_lost reaches us; nothing more can be sent.
            self.can_send = False

    def _finish(self) -> None:
        """Close the transport (after its buffer flushes), aborting if that stalls."""
        self.can_send = False
        if not self.transport.is_closing():
            self.transport.close()
        self._arm_timer()

    def _on_keepalive(self) -> None:
        self._keepalive = None
        if self._gone or not self.can_send:
            return
        now = self._loop.time()
        if self._pinged:
            if self._last_read >= self._ping_sent:
                self._pinged = False  # anything read since the ping answers it
            elif now - self._keepalive_due > self._ping_s * KEEPALIVE_LATE_SHARE:
                # The loop was stalled past the deadline: the pong may be waiting
                # unread in the socket. Judge again once reads have had a turn.
                self._arm_keepalive(now + self._ping_s * KEEPALIVE_LATE_SHARE)
                return
            else:
                self.close(CLOSE_INTERNAL_ERROR, "keepalive ping timeout")
                return
        quiet_until = self._last_read + self._ping_s
        if now < quiet_until:
            self._arm_keepalive(quiet_until)
            return
        self._pinged = True
        self._ping_sent = now
        ping = self._frames.ping()
        if ping:
            self.send(ping)  # behind queued frames, like any output
        self._arm_keepalive(now + self._ping_s)

    def _arm_keepalive(self, due: float) -> None:
        self._keepalive_due = due
        self._keepalive = self._loop.call_at(due, self._on_keepalive)

    def _stop_keepalive(self) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None

    def _arm_timer(self) -> None:
        if self._timer is None and not self._gone:
            self._timer = self._loop.call_later(CLOSE_TIMEOUT_S, self._abort)

    def _abort(self) -> None:
        self._timer = None
        if not self._gone:
            self.transport.abort()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _pause_reading(self) -> None:
        if not self._read_paused and not self._gone:
            self._read_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._read_paused and not self._gone:
            self._read_paused = False
            self.transport.resume_reading()

    def _maybe_resume_reading(self) -> None:
        if not self._write_paused and not self._held:
            self._resume_reading()
