"""The SSE event stream (docs/protocol.md#the-sse-stream): ``data: <base64 msgpack delta>``.

The subscriber joins the hub *before* the initial snapshot or replay is read,
buffering what arrives meanwhile, so no delta can fall between the two; on
start it writes the initial events, then the buffered deltas it has not
already covered (by seq), then streams.

A reader whose unsent bytes pass the bound falls behind, as a WebSocket
subscription does: it skips deltas and gets a fresh snapshot, written behind
what it still owes as its connection drains (deltas after it wait behind it,
and past the bound it falls behind again, for a snapshot once this one is
out). An op batch fanned out at once can pass the bound however fast the
reader reads: it is never cut for that. The snapshot is taken where the
state is durable (:meth:`CrdtService.durable_state`); deltas wait meanwhile,
as at the start. A reader that takes nothing at all is dropped by the
connection's send timeout. A replay is written in one step, so one larger
than the bound would put every stream that resumed with it behind at once:
that resume starts from a snapshot instead.

The stream ends when the read does (docs/permissions.md#when-access-ends):
at the token's expiry, or earlier when the rules that grant the read expire.
One timer per stream fires then; it writes a last event, ``event: end`` with
the error body (``token_expired``, or ``forbidden`` for a rule), and closes.
The event is named ``end``, not ``error``: an EventSource fires its
``onerror`` for an event named ``error``, where it could not be told apart
from a failed connection. Deltas of ops made from the end on (by their
``ts``) are never written, even before the timer has had its turn, nor a
``deleted`` (it has no ``ts``) that comes from the end on. A read that ended
while its start was prepared (awaiting the store) writes the end event alone.

A revoked token (docs/permissions.md#revoking-tokens) ends the stream the
same way, at once, with ``token_revoked``: the stream is registered with the
authenticator's revocation table for as long as it is open.

The start (the snapshot, the replay, or nothing when the client resumes up
to date) ends with one ``event: synced`` whose data, base64 msgpack as a
delta's, is ``{"kind": "synced", "ns", "id", "seq", "epoch"}``: where the
start left the reader, before any live delta. Named, so an EventSource's
``onmessage`` (and a reader that knows only deltas) does not take it for one.

A large first event (a snapshot) is encoded once per version of the CRDT and
the same bytes go to every stream that starts from it
(:mod:`syncd.shared_states`), written in slices as each connection drains
(:class:`~syncd.http.feed.Feed`): many readers starting at once hold one copy
of the state, not one each. What the stream writes meanwhile (deltas, pings,
the end) waits behind it, in order; past the bound the stream falls behind,
and its fresh snapshot follows this one.

A HEAD gets the head a GET would, and nothing is subscribed or taken for it.

The ping is a comment, ``: ping``, unless the client asks with
``?ping=event`` for a named event, ``event: ping`` with empty data: a
browser's EventSource hides comments from its page, so a client reading
through one can see its stream go silent (a dead proxy or NAT entry, which
ends nothing it could notice) only by events it is handed. Only the
stream that asks gets it (an EventSource's ``onmessage`` would not see it
either: it is not a ``message``); the default stays the comment, so readers
that know only deltas, ``synced`` and ``end`` meet nothing new.

An open stream is mostly idle, and what it holds is kept small: its ping and
its end are entries in wheels every stream shares (:mod:`syncd.http.timers`:
a ping at most 1/16 of ``SERVICE_SSE_PING_S`` late, the end at most
``EXPIRY_RESOLUTION_S``), not loop timers of their own, and the subscriber
keeps its state in slots.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Callable
from typing import Any, Final, cast

from syncd.auth.authenticator import NO_END_MS, Authenticator, Principal
from syncd.auth.revocations import token_revoked
from syncd.catchup import Start, start_from
from syncd.crdt.engine import Engine
from syncd.errors import ApiError, bad_request
from syncd.http.feed import FEED_SLICE_BYTES, Feed, Piece
from syncd.http.protocol import WRITE_HIGH_WATER
from syncd.http.request import Request, decimal_digits
from syncd.http.response import StreamResponse, StreamSink, dumps
from syncd.http.router import Router
from syncd.http.timers import EXPIRY_RESOLUTION_S, INTERVAL_SLOTS, Slot, Wheel
from syncd.hub import DeliverEach, EncodedDelta, Hub
from syncd.ids import check_crdt_id, check_namespace
from syncd.metrics import Metrics
from syncd.service import CrdtService
from syncd.shared_states import SharedStates
from syncd.wire import pack

log = logging.getLogger("syncd.http")

EVENT_STREAM: Final = b"text/event-stream"
PING: Final = b": ping\n\n"
"""The keep-alive, a comment: readers ignore it, proxies see bytes."""
PING_EVENT: Final = b"event: ping\ndata:\n\n"
"""The keep-alive a client asked to see (``?ping=event``): a named event, so
an EventSource hands it to the page. It needs its ``data:`` line, empty: an
event with no data is not dispatched (the SSE rules)."""
PING_PARAM: Final = "ping"
PING_AS_EVENT: Final = "event"
"""``?ping=``'s one value: the named ping event instead of the comment."""
QUERY_NAMES: Final = ("token", "since", "epoch", PING_PARAM)
"""The query parameters the route takes, each at most once."""
SSE_HEADERS: Final = ((b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no"))
END_EVENT: Final = b"event: end\ndata: "
"""The last event of a stream whose read ended; its data is the error body."""
DATA: Final = b"data: "
SYNCED_EVENT: Final = b"event: synced\ndata: "
"""The event that ends the start; its data is the ``synced`` message."""
EVENT_END: Final = b"\n\n"
SNAPSHOT_FORM: Final = "sse:snapshot"
"""The shared form of a snapshot event: its data, base64 of the msgpack delta."""
MAX_SEQ_DIGITS: Final = 20
"""Digits of a ``since``: every seq fits (they are 64-bit), and int() is never
asked to parse the thousands of digits it refuses with a ValueError."""


Snapshot = tuple[bytes | bytearray, int, str | None]
"""A snapshot's event data (maybe shared with other streams), its seq and epoch."""

# Resyncs waiting for the store, which nobody awaits: referenced here, or the
# loop may garbage-collect them half-way.
_resyncs: set[asyncio.Task[None]] = set()


class Snapshots:
    """Where a stream's snapshots come from (the start's and its resyncs')."""

    __slots__ = ("_engine", "_shared", "service")

    def __init__(self, engine: Engine, service: CrdtService, shared: SharedStates) -> None:
        self._engine = engine
        self._shared = shared
        self.service = service

    def take(self, ns: str, crdt_id: str) -> Snapshot:
        """The CRDT's state as it is in memory now (the caller knows it durable)."""
        engine = self._engine
        entry = engine.get(ns, crdt_id)
        if entry is None:  # nothing: a small snapshot of nothing
            delta = engine.snapshot_delta(ns, crdt_id)
            return base64.b64encode(pack(delta)), delta.get("seq") or 0, delta.get("epoch")
        data = self._shared.exact(
            entry,
            SNAPSHOT_FORM,
            lambda: base64.b64encode(pack(engine.snapshot_delta(ns, crdt_id))),
        )
        return data, entry.seq, entry.epoch


def end_event(body: dict[str, Any]) -> bytes:
    """``event: end`` with ``body`` as one line of JSON (JSON escapes newlines)."""
    return END_EVENT + dumps(body) + b"\n\n"


class StreamTimers:
    """The ping and end wheels every stream shares."""

    __slots__ = ("end", "ping", "ping_s")

    def __init__(self, ping_s: float) -> None:
        self.ping_s = ping_s
        self.ping: Wheel[SseSubscriber] = Wheel(ping_s / INTERVAL_SLOTS, _ping_due)
        self.end: Wheel[SseSubscriber] = Wheel(EXPIRY_RESOLUTION_S, _end_due)


def _ping_due(subscriber: SseSubscriber) -> None:
    subscriber._send_ping()


def _end_due(subscriber: SseSubscriber) -> None:
    subscriber._on_expiry()


class SseSubscriber(DeliverEach):
    # One per open stream: slots keep an idle one small.
    __slots__ = (
        "_auth",
        "_bound",
        "_closed",
        "_ended",
        "_epoch",
        "_expiry",
        "_feed",
        "_hub",
        "_lagging",
        "_last_seq",
        "_metrics",
        "_pending",
        "_ping",
        "_ping_bytes",
        "_principal",
        "_revoked",
        "_sink",
        "_snapshots",
        "_timers",
        "_until",
        "crdt_id",
        "ns",
    )

    def __init__(
        self,
        hub: Hub,
        metrics: Metrics,
        ns: str,
        crdt_id: str,
        *,
        bound: int,
        timers: StreamTimers,
        auth: Authenticator,
        principal: Principal,
        snapshots: Snapshots,
        ping: bytes = PING,
    ) -> None:
        self._hub = hub
        self._snapshots = snapshots
        self._metrics = metrics
        self._timers = timers
        self.ns = ns
        self.crdt_id = crdt_id
        self._auth = auth
        self._principal = principal
        until = auth.read_ends(principal, crdt_id)
        self._until = NO_END_MS if until is None else until
        """When the read ends (wall-clock ms)."""
        self._expiry: Slot[SseSubscriber] | None = None
        self._sink: StreamSink | None = None
        self._feed: Feed | None = None
        """The first event still going out, and what waits behind it."""
        self._pending: list[EncodedDelta] | None = []
        """Deltas that arrived before the start; None once started."""
        self._last_seq = -1
        self._epoch: str | None = None
        self._bound = bound
        self._lagging = False
        """Past the bound: deltas are skipped until a fresh snapshot."""
        self._ping: Slot[SseSubscriber] | None = None
        self._ping_bytes = ping
        """What each ping writes: PING, or PING_EVENT when asked for."""
        self._closed = False
        self._ended = False
        """The end event is queued: nothing may follow it (with a snapshot
        still going out, the stream stays open until the reader has it)."""
        self._revoked = auth.revocations.watch(principal, self)
        """Revoked before the stream started: it ends as it starts."""

    def deliver(self, delta: EncodedDelta) -> None:
        if self._closed or self._ended:
            return
        pending = self._pending
        if pending is not None:
            pending.append(delta)
            return
        if self._lagging:
            return  # the fresh snapshot holds it
        self._write(delta)

    def covered(self) -> None:
        """The deltas that arrived so far are in what the stream starts from
        (each reached the engine before it was published): drop them. A
        "deleted" among them, of a life that ended before the one it starts
        with, is not told apart by seq."""
        if self._pending is not None:
            self._pending.clear()

    def _write(self, delta: EncodedDelta) -> None:
        sink = self._sink
        assert sink is not None
        kind = delta.delta.get("kind")
        if kind == "op":
            if delta.seq <= self._last_seq and delta.delta.get("epoch") == self._epoch:
                return  # already covered by the snapshot or replay
            if delta.delta.get("ts", 0) >= self._until:
                return  # made after the read ended; the expiry timer ends the stream
        elif self._read_over():
            return  # a "deleted" or a snapshot has no ts: made now, after the read ended
        # Where the reader is now: a snapshot the hub fans out (a cluster node
        # reloading the CRDT) may be behind what the stream sent, and the ops
        # after it are new ones at those seqs; a "deleted" ends the life.
        self._last_seq = delta.seq if kind != "deleted" else -1
        self._epoch = delta.delta.get("epoch")
        # While the snapshot is fed, the transport holds views of the shared
        # state, not this stream's own bytes: what waits behind it counts.
        feed = self._feed
        if (sink.buffered() if feed is None else feed.own_bytes) > self._bound:
            self._fall_behind()
            return
        self._send(delta.sse())

    def _fall_behind(self) -> None:
        """Past the bound: skip deltas, and resync once what the connection
        holds of ours is written (at once when that is only the transport's
        buffer: the snapshot waits there behind it, fed as it drains)."""
        self._lagging = True
        if self._feed is None:
            self._resync()

    def _resync(self) -> None:
        """A fresh snapshot, where the CRDT's state is durable."""
        if self._closed or self._ended or not self._lagging or self._pending is not None:
            return
        self._lagging = False
        snapshots = self._snapshots
        if snapshots.service.durable_now(self.ns, self.crdt_id):
            self._feed_snapshot(snapshots.take(self.ns, self.crdt_id))
            return
        # Ops of it in flight: deltas wait, as at the start, for a snapshot
        # taken where they are durable.
        self._pending = []
        task = asyncio.get_running_loop().create_task(self._resync_durable())
        _resyncs.add(task)
        task.add_done_callback(_resyncs.discard)

    async def _resync_durable(self) -> None:
        snapshots = self._snapshots
        ns, crdt_id = self.ns, self.crdt_id

        def take() -> Snapshot:
            self.covered()
            return snapshots.take(ns, crdt_id)

        try:
            taken = await snapshots.service.durable_state(
                ns, crdt_id, take, alive=lambda: not self._closed
            )
        except Exception as exc:
            if self._closed:
                return  # gone meanwhile (the server stopping closes the store too)
            # The CRDT cannot be read (the store is away, or a bug): the
            # stream ends, and the client resumes with since.
            if isinstance(exc, ApiError):
                log.warning("resync of %s/%s failed: %s", ns, crdt_id, exc)
            else:
                log.exception("resync of %s/%s failed", ns, crdt_id)
            if self._sink is not None:
                self._sink.abort()
            return
        if taken is None or self._closed:
            return
        pending, self._pending = self._pending, None
        self._feed_snapshot(taken)
        for encoded in pending or ():
            self.deliver(encoded)

    def _feed_snapshot(self, taken: Snapshot) -> None:
        """A resync's snapshot event, after what the connection holds, in
        slices as it drains."""
        if self._read_over():
            # It may hold ops made from the end on: the end instead.
            self._end(self._auth.read_ended(self._principal, self.crdt_id).body())
            return
        data, self._last_seq, self._epoch = taken
        assert self._feed is None
        feed = self._feed = Feed()
        feed.add(DATA)
        feed.add_shared(data)
        feed.add(EVENT_END)
        self._pump()

    def _send(self, data: bytes) -> None:
        """Write ``data`` after what the feed still holds."""
        feed = self._feed
        if feed is not None:
            feed.add(data)
        else:
            sink = self._sink
            assert sink is not None
            sink.write(data)

    def _pump(self) -> None:
        """Write what the feed holds while the connection takes it (its drain
        calls this again)."""
        feed = self._feed
        sink = self._sink
        if feed is None or sink is None:
            return
        # The sink hands what it is given to its transport, which takes any
        # bytes-like object: the feed's slices are views, never copied.
        if feed.pump(cast("Callable[[Piece], None]", sink.write), self._sink_full):
            self._feed = None
            if feed.close_after:
                sink.close()
            elif self._lagging:
                self._resync()  # what waited behind it passed the bound

    def _sink_full(self) -> bool:
        # Past the connection's high-water mark its transport has paused, and
        # its drain (under the low mark) calls _pump.
        sink = self._sink
        return sink is None or sink.closed or sink.buffered() > WRITE_HIGH_WATER

    def start(
        self,
        sink: StreamSink,
        initial: list[EncodedDelta],
        snapshot: Snapshot | None = None,
        resume: tuple[int, str] | None = None,
    ) -> None:
        """Write the first events, the ``synced`` event, then the deltas that
        came meanwhile. ``snapshot`` is the snapshot to start from; else
        ``initial`` is the replay from ``resume``, the client's (since, epoch)
        (nothing: it is up to date)."""
        self._sink = sink
        sink.on_close(self.close)
        sink.on_drain(self._pump)
        if self._revoked:
            self._end(token_revoked().body())
            return
        if self._read_over():
            # It ended while the start was prepared: nothing of it is sent (a
            # snapshot taken since may hold ops made from the end on).
            self._end(self._auth.read_ended(self._principal, self.crdt_id).body())
            return
        if resume is not None:
            self._last_seq, self._epoch = resume
        if snapshot is not None:
            data, self._last_seq, self._epoch = snapshot
            if len(data) < FEED_SLICE_BYTES:
                sink.write(DATA + bytes(data) + EVENT_END)
            else:
                feed = self._feed = Feed()
                feed.add(DATA)
                feed.add_shared(data)
                feed.add(EVENT_END)
                self._pump()
        # Started: from here on a delta goes out, or waits for a resync
        # (deliver). No delta arrives before the loops below are done.
        pending, self._pending = self._pending, None
        for encoded in initial:
            self.deliver(encoded)
        self._send_synced()
        for encoded in pending or ():
            self.deliver(encoded)
        self._schedule_ping()
        self._arm_expiry()

    def _read_over(self) -> bool:
        """The read has ended (by the wall clock)."""
        return self._until != NO_END_MS and self._auth.now_ms() >= self._until

    def _send_synced(self) -> None:
        """``event: synced`` at where the start left the reader (once: the
        stream has one start)."""
        message = {
            "kind": "synced",
            "ns": self.ns,
            "id": self.crdt_id,
            "seq": max(self._last_seq, 0),
            "epoch": self._epoch,
        }
        self._send(SYNCED_EVENT + base64.b64encode(pack(message)) + EVENT_END)

    def _arm_expiry(self) -> None:
        if self._closed or self._until == NO_END_MS:
            return
        when = asyncio.get_running_loop().time() + self._auth.seconds_until(self._until)
        self._expiry = self._timers.end.add(when, self)

    def _on_expiry(self) -> None:
        self._expiry = None
        sink = self._sink
        if self._closed or sink is None or sink.closed:
            return
        if not self._read_over():
            self._arm_expiry()  # the loop's clock ran ahead of the wall clock
            return
        self._end(self._auth.read_ended(self._principal, self.crdt_id).body())

    def end_revoked(self) -> None:
        """The token was revoked (the revocation table calls this)."""
        self._revoked = True
        self._end(token_revoked().body())

    def _end(self, body: dict[str, Any]) -> None:
        sink = self._sink
        if self._closed or self._ended or sink is None or sink.closed:
            return  # not started yet (start() ends it), or ended already
        self._ended = True
        self._send(end_event(body))
        feed = self._feed
        if feed is not None:
            feed.close_after = True  # once the first event is out: it cannot be cut
        else:
            sink.close()  # after what is queued, the end event last

    def _schedule_ping(self) -> None:
        if self._closed:
            return
        when = asyncio.get_running_loop().time() + self._timers.ping_s
        self._ping = self._timers.ping.add(when, self)

    def _send_ping(self) -> None:
        self._ping = None
        if self._sink is not None and not self._sink.closed and not self._ended:
            self._send(self._ping_bytes)
            self._schedule_ping()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pending = None
        feed = self._feed
        if feed is not None:
            self._feed = None
            feed.clear()
        if self._ping is not None:
            self._timers.ping.remove(self._ping, self)
            self._ping = None
        if self._expiry is not None:
            self._timers.end.remove(self._expiry, self)
            self._expiry = None
        self._auth.revocations.unwatch(self._principal, self)
        self._hub.unsubscribe(self.ns, self.crdt_id, self)
        self._metrics.sse_connections_active.dec()


def within(records: list[dict[str, Any]], bound: int) -> list[EncodedDelta] | None:
    """``records`` as events, or None when together they pass ``bound`` bytes
    (a stream owing more than that falls behind and resyncs with a snapshot:
    see :meth:`SseSubscriber._write`)."""
    encoded: list[EncodedDelta] = []
    size = 0
    for record in records:
        event = EncodedDelta(record)
        size += len(event.sse())
        if size > bound:
            return None
        encoded.append(event)
    return encoded


def ping_bytes(value: str | None) -> bytes:
    """What a stream's pings write for ``?ping=``: absent, the comment;
    ``event``, the named event; anything else 400, not the comment unasked
    (a client counting on seeing pings would take its stream for dead)."""
    if value is None:
        return PING
    if value != PING_AS_EVENT:
        raise bad_request(
            f"{PING_PARAM}: {PING_AS_EVENT} is the only one (leave it out for the comment)"
        )
    return PING_EVENT


def _no_body(sink: StreamSink) -> None:
    """A HEAD's stream, which never starts: see ``events``."""


def register(
    router: Router,
    *,
    auth: Authenticator,
    engine: Engine,
    service: CrdtService,
    hub: Hub,
    metrics: Metrics,
    buffer_bytes: int,
    ping_s: float,
) -> None:
    timers = StreamTimers(ping_s)
    snapshots = Snapshots(engine, service, SharedStates())

    async def events(request: Request) -> StreamResponse:
        ns = check_namespace(request.params["ns"])
        crdt_id = check_crdt_id(request.params["id"])
        # Each parameter at most once (docs/http-api.md#conventions), the
        # token too: a proxy or log filter may have read the other copy.
        query = request.known_query(QUERY_NAMES)
        # Browsers' EventSource cannot set headers, so ?token= works here as
        # on the WebSocket upgrade (docs/protocol.md#the-websocket).
        principal = auth.authenticate(
            request.headers.get("authorization"), ns, query_token=query.get("token")
        )
        auth.check_read(principal, crdt_id)
        since_text = query.get("since")
        since: int | None = None
        if since_text is not None:
            digits = decimal_digits(since_text)
            if digits is None or len(digits) > MAX_SEQ_DIGITS:
                raise bad_request(
                    f"since: an integer of at most {MAX_SEQ_DIGITS} digits is required"
                )
            since = int(digits)
        epoch = query.get("epoch")
        ping = ping_bytes(query.get(PING_PARAM))
        if request.method == "HEAD":
            # The head a GET gets, with no body (the connection never starts a
            # HEAD's stream): nothing subscribes, and the start (a snapshot of
            # a large CRDT maybe) is not built for nothing.
            return StreamResponse(_no_body, EVENT_STREAM, SSE_HEADERS)
        subscriber = SseSubscriber(
            hub,
            metrics,
            ns,
            crdt_id,
            bound=buffer_bytes,
            timers=timers,
            auth=auth,
            principal=principal,
            snapshots=snapshots,
            ping=ping,
        )
        hub.subscribe(ns, crdt_id, subscriber)
        metrics.sse_connections_active.inc()

        def take() -> Snapshot:
            # Taken where the state is durable (catchup.start_from): deltas from
            # here on wait in the subscriber, those it covers skipped by seq.
            return snapshots.take(ns, crdt_id)

        async def begin(since: int | None, epoch: str | None) -> Start[Snapshot]:
            try:
                start = await start_from(
                    service, ns, crdt_id, since, epoch, take, covered=subscriber.covered
                )
            except BaseException:
                subscriber.close()
                raise
            assert start is not None  # no alive(): a request that goes away is cancelled
            return start

        start = await begin(since, epoch)
        replay = None if start.records is None else within(start.records, buffer_bytes)
        if start.records is not None and replay is None:
            # The replay is written in one step: past the bound the stream
            # would end before the reader could take any of it, however fast
            # it reads, and again at each resume. A snapshot goes out as the
            # connection drains.
            start = await begin(None, None)
        initial: list[EncodedDelta] = []
        snapshot = start.snapshot
        resume: tuple[int, str] | None = None
        if snapshot is None:
            assert replay is not None
            initial = replay
            # A replay (or nothing): only for this life, from since on.
            assert since is not None and epoch is not None
            resume = (since, epoch)
        return StreamResponse(
            lambda sink: subscriber.start(sink, initial, snapshot, resume),
            EVENT_STREAM,
            SSE_HEADERS,
            abort=subscriber.close,
        )

    router.add("GET", "/v1/namespaces/{ns}/crdts/{id}/events", events)
