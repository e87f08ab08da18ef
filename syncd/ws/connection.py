"""One native WebSocket connection's I/O: its ops, subscriptions and the flusher.

Theory of operation
-------------------
A :class:`WsConnection` is the adapter around the sans-I/O native
:class:`~syncd.ws.session.Session` (see its docstring for the protocol
itself). The socket, the keepalive and close timers, the closing handshake,
backpressure and the connection gauge are those of every WebSocket,
:class:`~syncd.ws.base_connection.BaseConnection`; the actions of the native
protocol are carried out here:

- ``Apply``: the ops go through the same service as HTTP ops (auth, engine,
  durable store, webhooks with source ``ws``). With a store that stages ops,
  the read's ops are applied by one task (one store append and one wait for
  the group commit, not one of each per op); otherwise each op has a task of
  its own, started in arrival order (the engine applies an op before the task
  first waits, so ops still apply in order).
- ``Subscribe`` / ``Unsubscribe``: a :class:`~syncd.ws.subscription.WsSubscription`
  joins or leaves the hub, starting from a snapshot or a replay
  (:mod:`syncd.catchup`); a large snapshot is encoded once per version and
  shared by the subscriptions sent it (:mod:`syncd.shared_states`), written
  in slices as the socket drains, what follows it behind it. The hub hands it the delta's frame bytes, shared by
  every subscriber; they are queued here and written by the app's
  :class:`~syncd.ws.flusher.Flusher`, one send per connection per flush.
  What the session sends goes behind what is queued, so the client sees
  everything in the order it was produced.

Expiry: the shared expiry timer is set to the session's :attr:`expiry_due`
(the token's expiry, or the earliest end of a subscription's read) and
re-armed when the subscriptions change. No per-delta clock read: a
subscription drops deltas of ops made from its end on by their ``ts`` (see
:mod:`syncd.ws.subscription`), the timer does the rest.

Revocation: the connection is registered with the authenticator's revocation
table while it is open; revoking its token calls :meth:`WsConnection.end_revoked`,
which ends it as expiry does (:meth:`Session.revoke`).

Backpressure: while the transport's buffer is over its high-water mark (the
subscriber bound), subscriptions skip deltas; when it drains, those that
skipped some get a fresh snapshot, as many as the transport takes: once one
is being fed (a large state) or the transport is over its mark again, the
rest wait for the feed to be out or the next drain.

Disconnect: once the connection is gone and its in-flight ops are done, the
ops the session names (presence's ``leave``) are applied on its behalf, with
the same principal, through the service: durable and broadcast; each only
while the CRDT is in the life the connection wrote it in (a deleted presence
is not brought back by a leave), and only while the entry is the one it wrote
(the stamp its last write carried is still the entry's: another connection of
the same client shares the entry, and may have written it since). Both are
asked where the leave is ordered (``CrdtService.apply_ops``'s withdrawal: on
PostgreSQL under the CRDT's lock, once caught up with the other nodes), not
only of this node's memory before. An explicit ``leave`` the write rules
refuse (the V2 rule that granted the writes expired) is such a withdrawal
too when this connection owes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from syncd.catchup import start_from
from syncd.crdt.presence import Presence
from syncd.crdt.ydoc import YDoc
from syncd.errors import ApiError
from syncd.shared_states import SharedStates
from syncd.ws.base_connection import BaseConnection, ConnectionTimers
from syncd.ws.base_session import Action
from syncd.ws.flusher import Flusher
from syncd.ws.session import Apply, Session, StagedOp, Subscribe, Unsubscribe
from syncd.ws.subscription import TakenSnapshot, WsSubscription

if TYPE_CHECKING:
    from syncd.auth.authenticator import Authenticator, Principal
    from syncd.config import Settings
    from syncd.crdt.base import Crdt
    from syncd.crdt.engine import ApplyResult, Engine, Entry
    from syncd.http.protocol import ServerContext
    from syncd.hub import Hub
    from syncd.metrics import Metrics
    from syncd.service import CrdtService, Withdrawal
    from syncd.store.base import Store

log = logging.getLogger("syncd.ws")

COALESCE_MAX_BYTES: Final = 64 * 1024
"""Queued broadcast bytes that are flushed at once instead of at the flusher's
next pass: a send this size is already cheap per byte, and the queue (which
the subscriber bound does not see) stays small."""

_REPLAY_FAILED: Final = ApiError(503, "unavailable", "could not read the CRDT's history")

_LATER: Final = TakenSnapshot(None, None, 0, None)
"""A start's snapshot not taken: the transport has no room (see _replay_and_start)."""

# Tasks nobody awaits (disconnect ops, replays) must be referenced somewhere,
# or the loop may garbage-collect them half-way.
_background: set[asyncio.Task[Any]] = set()


def _spawn(coro: Any) -> asyncio.Task[Any]:
    task = asyncio.get_running_loop().create_task(coro)
    _background.add(task)
    task.add_done_callback(_background.discard)
    return task


async def wait_background(timeout: float) -> None:
    """Let closed connections finish their disconnect ops (graceful shutdown)."""
    if _background:
        await asyncio.wait(list(_background), timeout=timeout)


@dataclass(frozen=True)
class SessionContext:
    """What every WebSocket connection uses, wired once by app.py."""

    auth: Authenticator
    engine: Engine
    store: Store
    hub: Hub
    metrics: Metrics
    service: CrdtService
    settings: Settings
    server: Callable[[], ServerContext | None]
    """The HTTP server's shared state (connection count, shutdown), once it runs."""
    shared: SharedStates = field(default_factory=SharedStates)
    """Large snapshots being sent to subscriptions, one per version and form."""


def _written_since(crdt: Crdt, client_id: int, stamp: int | None) -> bool:
    """Whether ``crdt`` holds an entry of ``client_id`` written after the
    write that carried ``stamp`` (presence's shared per-client entry; other
    types, or no stamp: never)."""
    if stamp is None or not isinstance(crdt, Presence):
        return False
    held = crdt.stamp_of(client_id)
    return held is not None and held > stamp


def _still_ours(client_id: int, epoch: str | None, stamp: int | None) -> Withdrawal:
    """Whether an entry is still the one this connection wrote: the CRDT in
    the life it wrote it in (a deleted presence is not brought back by a
    leave), and no other connection of the same client wrote it since."""

    def ours(entry: Entry | None) -> bool:
        return (
            entry is not None
            and entry.epoch == epoch
            and not _written_since(entry.crdt, client_id, stamp)
        )

    return ours


class WsConnection(BaseConnection):
    __slots__ = (
        "_app",
        "_flusher",
        "_lagging",
        "_out",
        "_out_bytes",
        "_resync_waiting",
        "_resyncing",
        "_staging",
        "_tasks",
        "ns",
        "principal",
        "subscriptions",
    )

    session: Session

    def __init__(
        self,
        app: SessionContext,
        transport: asyncio.Transport,
        trailing: bytes,
        ns: str,
        principal: Principal,
        flusher: Flusher,
        timers: ConnectionTimers,
    ) -> None:
        settings = app.settings
        self._app = app
        self.ns = ns
        self.principal = principal
        session = Session(
            self._do,
            app.auth,
            principal,
            max_message_bytes=settings.max_body_bytes,
            json_max_depth=settings.json_max_depth,
            max_subscriptions=settings.max_subscriptions,
            ping_s=settings.ws_ping_s,
            now=asyncio.get_running_loop().time(),
        )
        self.subscriptions: dict[str, WsSubscription] = {}
        self._lagging: list[WsSubscription] | None = None
        """Subscriptions that skipped deltas while the peer was not reading
        (None: none; like the next, an idle connection holds no list)."""
        self._flusher = flusher
        self._out: list[bytes] | None = None
        """Broadcast frames (and what followed them) waiting for the flusher
        (None: nothing waits)."""
        self._out_bytes = 0
        self._resyncing = False
        """The lagging subscriptions are being resynced (see _resync_lagging)."""
        self._resync_waiting = False
        """A resync waits for its CRDT's ops in flight (see _resync_lagging)."""
        self._tasks: set[asyncio.Task[None]] | None = None
        """Op tasks still running: disconnect ops wait for them (None: no op
        yet; an empty set is 216 bytes that an idle connection need not keep)."""
        self._staging = app.service.stages
        super().__init__(
            transport,
            session,
            trailing,
            bound=settings.subscriber_buffer_bytes,
            auth=app.auth,
            metrics=app.metrics,
            server=app.server,
            timers=timers,
        )
        self._arm_expiry()
        if app.auth.revocations.watch(principal, self):
            # Revoked between the upgrade's check and now.
            self._loop.call_soon(self.end_revoked)

    # -- the base connection's hooks -----------------------------------------

    def _closing(self) -> None:
        self._out = None  # flushed before our close frame, or the peer is leaving
        self._out_bytes = 0
        # Nothing more goes out: the subscriptions are done now, not once the
        # transport is (a peer that closed while reading nothing of ours would
        # keep them, and their deltas' work, for the close timeout).
        for subscription in list(self.subscriptions.values()):
            self._drop_subscription(subscription)
        self._lagging = None

    def _lost(self) -> None:
        self._out = None
        self._out_bytes = 0
        self._app.auth.revocations.unwatch(self.principal, self)
        for subscription in list(self.subscriptions.values()):
            self._drop_subscription(subscription)
        self._lagging = None
        tasks = self._tasks
        if tasks or self.session.may_have_disconnect_ops:
            _spawn(self._after_disconnect(list(tasks or ())))

    def _drained(self) -> None:
        self._resync_lagging()

    def _feed_out(self) -> None:
        if self._lagging:
            self._resync_lagging()

    def _resync_lagging(self) -> None:
        """Fresh snapshots for the subscriptions that skipped deltas, as long
        as the transport takes them: once one is being fed (a large state,
        held for this peer alone and not counted against the bound) or the
        transport is over its mark again, the rest wait in ``_lagging`` for
        the feed to be out (:meth:`_feed_out`) or the next drain. Fed all at
        once, a peer that read a little and stopped again held a whole state
        per lagging subscription. So does one whose CRDT has ops in flight:
        the rest wait until its snapshot, taken once they are durable, is
        sent (:meth:`_resync`)."""
        lagging = self._lagging
        if not lagging or self._resyncing:
            return  # (a feed that went out at once, during a resync below)
        self._resyncing = True
        try:
            engine = self._app.engine
            shared = self._app.shared
            durable_now = self._app.service.durable_now
            while (
                lagging
                and self._feed is None
                and not self._write_paused
                and not self._resync_waiting
            ):
                subscription = lagging.pop(0)
                if durable_now(self.ns, subscription.crdt_id):
                    subscription.resync(engine, shared)
                elif subscription.resync_later():
                    # Ops of it in flight: the snapshot waits until they are durable.
                    self._resync_waiting = True
                    _spawn(self._resync(subscription))
        finally:
            self._resyncing = False
            if not lagging and self._lagging is lagging:
                self._lagging = None

    def _expiry_due_ms(self) -> int | None:
        return self.session.expiry_due

    def _expire(self) -> None:
        self.session.expire()

    # -- the session's actions ----------------------------------------------

    def _act(self, action: Action) -> None:
        if isinstance(action, Apply):
            self._apply(action.run)
        elif isinstance(action, Subscribe):
            if not self.can_send:
                return  # a leaving peer's subscribe (see Leaving): nothing would go out
            self._subscribe(action)
            self._arm_expiry()
        elif isinstance(action, Unsubscribe):
            subscription = self.subscriptions.get(action.crdt_id)
            if subscription is not None:
                self._drop_subscription(subscription)
            if not self._expiring:
                self._arm_expiry()
        else:
            raise TypeError(f"not a native WebSocket action: {action!r}")

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
            if self._lagging is None:
                self._lagging = []
            self._lagging.append(subscription)
            return False
        out = self._out
        if out is None:
            out = self._out = []
            self._flusher.mark(self)
        elif not out:
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
        out = self._out
        if out:
            out.append(data)
            self._out_bytes += len(data)
            if self._out_bytes >= COALESCE_MAX_BYTES:
                self.flush()  # so the transport sees it and can pause us
        else:
            self._write(data)

    def flush(self) -> None:
        out = self._out
        if not out:
            return
        self._out = None
        self._out_bytes = 0
        if not self.can_send:
            return
        self._write(out[0] if len(out) == 1 else b"".join(out))

    def end_revoked(self) -> None:
        """The token was revoked (the revocation table calls this)."""
        if self._gone:
            return
        self._expiring = True  # one re-arm after all of it, as for expiry
        try:
            self.session.revoke()
        finally:
            self._expiring = False
        self._arm_expiry()

    # -- ops -----------------------------------------------------------------

    def _apply(self, run: list[StagedOp]) -> None:
        if self._staging:
            self._track(self._apply_run(run))
        else:
            for staged in run:
                self._track(self._apply_one(staged))

    def _track(self, coro: Any) -> None:
        task: asyncio.Task[None] = self._loop.create_task(coro)
        tasks = self._tasks
        if tasks is None:
            tasks = self._tasks = set()
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _apply_run(self, run: list[StagedOp]) -> None:
        """Apply a read's ops in arrival order, persist their records at once,
        answer each (ack or its own error) once they are durable."""
        service = self._app.service
        session = self.session
        ns = self.ns
        principal = self.principal
        applied: list[tuple[StagedOp, ApplyResult]] = []
        records: list[dict[str, Any]] = []
        residency = service.residency
        engine = self._app.engine
        # Keep the CRDTs the run touches in memory until it is staged, and load
        # those that are not there (the loads await).
        held: set[str] = set()
        missing: set[str] = set()
        if service.store.loads_on_demand:
            held = {s.crdt_id for s in run}
            for crdt_id in held:
                residency.hold(ns, crdt_id)
            # Not in memory, or a Yjs document whose type depths are not read
            # yet (its first write since it was loaded): ensure_for_write reads
            # them in a thread, not in stage() on the event loop.
            for crdt_id in held:
                entry = engine.lookup((ns, crdt_id))
                if entry is None or (type(entry.crdt) is YDoc and entry.crdt.nesting_unread):
                    missing.add(crdt_id)
        unreadable: dict[str, ApiError | None] = {}
        try:
            for crdt_id in missing:
                try:
                    await service.ensure_for_write(ns, crdt_id)
                except ApiError as exc:
                    unreadable[crdt_id] = exc
                except Exception:
                    log.exception("loading %s/%s failed", ns, crdt_id)
                    unreadable[crdt_id] = None
            for staged in run:
                if staged.crdt_id in unreadable:
                    session.fail(staged, unreadable[staged.crdt_id])
                    continue
                try:
                    try:
                        result = service.stage(ns, staged.crdt_id, staged.body, principal)
                    except ApiError as exc:
                        withdrawal = self._withdrawal(exc, staged)
                        if withdrawal is None:
                            raise
                        result = service.stage(
                            ns, staged.crdt_id, staged.body, principal, withdrawal=withdrawal
                        )
                except ApiError as exc:
                    session.fail(staged, exc)
                except Exception:
                    log.exception("op on %s/%s failed", ns, staged.crdt_id)
                    session.fail(staged, None)
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
                        session.fail(staged, exc)
                except Exception:
                    log.exception("ops on %s failed", ns)
                    for staged, _ in applied:
                        session.fail(staged, None)
                else:
                    for staged, result in applied:
                        session.ack(staged, result)
        finally:
            for crdt_id in held:
                residency.release(ns, crdt_id)
            for staged in run:
                session.drop(staged)
            session.answers_ready()

    async def _apply_one(self, staged: StagedOp) -> None:
        session = self.session
        service = self._app.service
        try:
            try:
                result = await service.apply_ops(
                    self.ns, staged.crdt_id, staged.body, self.principal, "ws"
                )
            except ApiError as exc:
                withdrawal = self._withdrawal(exc, staged)
                if withdrawal is None:
                    raise
                result = await service.apply_ops(
                    self.ns,
                    staged.crdt_id,
                    staged.body,
                    self.principal,
                    "ws",
                    withdrawal=withdrawal,
                )
        except ApiError as exc:
            session.fail(staged, exc)
        except Exception:
            log.exception("op on %s/%s failed", self.ns, staged.crdt_id)
            session.fail(staged, None)
        else:
            session.ack(staged, result)
        finally:
            session.drop(staged)
            # From here rather than as a done callback: no extra loop pass per op.
            session.answers_ready()

    def _withdrawal(self, refused: ApiError, staged: StagedOp) -> Withdrawal | None:
        """An explicit leave refused by the write rules (the V2 rule that
        granted the writes expired) is a withdrawal all the same, as the one
        sent at the close is, when this connection owes it: of the entry it
        wrote, in the same life (see :func:`_still_ours`). None otherwise."""
        if refused.status != 403:
            return None
        owed = self.session.owed(staged.crdt_id, staged.body)
        if owed is None:
            return None
        return _still_ours(self.principal.client_id, *owed)

    async def _after_disconnect(self, inflight: list[asyncio.Task[None]]) -> None:
        if inflight:
            await asyncio.wait(inflight)
        service = self._app.service
        client_id = self.principal.client_id
        for crdt_id, epoch, stamp, op in self.session.disconnect_ops_stamped():
            try:
                ours = _still_ours(client_id, epoch, stamp)
                if not ours(await service.ensure(self.ns, crdt_id)):
                    # Deleted since we wrote it (and maybe made anew by
                    # others: the op would start a new life for nothing), or
                    # another connection of the same client (a second tab,
                    # or our own reconnect) wrote the shared entry after us:
                    # it is theirs now, and theirs to leave. Skipped quietly
                    # as this node sees it; asked again where the leave is
                    # ordered (on PostgreSQL, once caught up with the other
                    # nodes, whose newer write may not have reached us yet).
                    continue
                # A withdrawal of our own entry, not a write of new data: the
                # rule that granted the writes may have expired since.
                await service.apply_ops(
                    self.ns, crdt_id, dict(op), self.principal, "ws", withdrawal=ours
                )
            except ApiError as exc:
                log.info("disconnect op on %s/%s refused: %s", self.ns, crdt_id, exc.message)
            except Exception:
                log.exception("disconnect op on %s/%s failed", self.ns, crdt_id)

    # -- subscriptions ---------------------------------------------------------

    def _subscribe(self, action: Subscribe) -> None:
        app = self._app
        crdt_id = action.crdt_id
        subscription = WsSubscription(
            self,
            self.ns,
            crdt_id,
            action.binary,
            action.until,
            since=action.since,
            epoch=action.epoch,
        )
        self.subscriptions[crdt_id] = subscription
        # Join the hub before reading the state: deltas made meanwhile wait
        # in the subscription, so none falls between the two.
        app.hub.subscribe(self.ns, crdt_id, subscription)
        app.metrics.subscriptions_active.inc()
        if (
            action.since is None
            and ((self.ns, crdt_id) in app.engine or not app.store.loads_on_demand)
            and app.service.durable_now(self.ns, crdt_id)
        ):
            subscription.start_snapshot(app.engine, app.shared)
        else:
            # A start that awaits the store counts against the read bound
            # (MAX_INFLIGHT_OPS), as an op does: subscribe/unsubscribe pairs
            # make no reply, and while loads were slow each left a task
            # behind with reading never paused.
            self.session.started()
            _spawn(self._start_replay(subscription, action.since, action.epoch))

    async def _start_replay(
        self, subscription: WsSubscription, since: int | None, epoch: str | None
    ) -> None:
        try:
            await self._replay_and_start(subscription, since, epoch)
        finally:
            self.session.settled()

    async def _replay_and_start(
        self, subscription: WsSubscription, since: int | None, epoch: str | None
    ) -> None:
        app = self._app

        def take() -> TakenSnapshot:
            if self._feed is not None or self._write_paused:
                # A state is still going out, or the transport is over its
                # mark: taken now, this one would wait behind it, held for
                # this peer alone (a read of subscribes spawns many starts).
                return _LATER
            return subscription.take_snapshot(app.engine, app.shared)

        try:
            start = await start_from(
                app.service,
                self.ns,
                subscription.crdt_id,
                since,
                epoch,
                take,
                covered=subscription.covered,
                alive=lambda: subscription.active,
            )
        except Exception as exc:
            self._start_failed(subscription, exc)
            return
        if start is None:
            return  # unsubscribed meanwhile
        if start.snapshot is _LATER:
            self._start_later(subscription)
        elif start.snapshot is not None:
            subscription.start_taken(start.snapshot)
        else:
            subscription.start(start.records or [])

    def _start_later(self, subscription: WsSubscription) -> None:
        """Start ``subscription`` from a snapshot once the transport has room:
        as a lagging one, resynced (its snapshot, then ``synced``) when the
        feed is out or the connection drains (:meth:`_resync_lagging`)."""
        if not subscription.active or subscription.pending is None:
            return
        subscription.pending = None  # the snapshot it gets will hold them
        subscription.lag = True
        if self._lagging is None:
            self._lagging = []
        self._lagging.append(subscription)
        self._resync_lagging()  # room already (the feed went out meanwhile)

    async def _resync(self, subscription: WsSubscription) -> None:
        """A lagging subscription's fresh snapshot, once the CRDT's state it
        takes is durable (see ``CrdtService.durable_state``)."""
        app = self._app

        def take() -> TakenSnapshot:
            subscription.covered()
            return subscription.take_snapshot(app.engine, app.shared)

        try:
            taken = await app.service.durable_state(
                self.ns, subscription.crdt_id, take, alive=lambda: subscription.active
            )
        except Exception as exc:
            self._start_failed(subscription, exc)
        else:
            if taken is not None:
                subscription.start_taken(taken)
        finally:
            self._resync_waiting = False
        self._resync_lagging()  # the next, as the transport takes it

    def _start_failed(self, subscription: WsSubscription, exc: Exception) -> None:
        """The start (or a resync) could not read the CRDT: the subscription ends
        with an error, the connection goes on.

        An :class:`ApiError` (a :class:`~syncd.errors.StoreUnavailable` too:
        the store or the database is away, or a stored copy cannot be read)
        is a refusal the service expects and says why: one line with it, as
        the client is told. Its stack trace says nothing more, and a store
        that is away fails every subscriber's start: one trace each would
        bury the log. Anything else is a bug: its stack trace is kept."""
        if subscription.active:
            if isinstance(exc, ApiError):
                log.warning("replay for %s/%s failed: %s", self.ns, subscription.crdt_id, exc)
            else:
                log.exception("replay for %s/%s failed", self.ns, subscription.crdt_id)
            self._drop_subscription(subscription)
            error = exc if isinstance(exc, ApiError) else _REPLAY_FAILED
            self.session.subscription_failed(subscription.crdt_id, error, subscription.binary)
            self._arm_expiry()

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
            if self._lagging is not None:
                self._lagging.remove(subscription)
