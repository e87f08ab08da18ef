"""The one op path that HTTP and WebSocket share.

plan (shape, type) -> authorize (write + mask) -> engine.apply (memory) ->
store (durable) -> only then: answer, hub broadcast, webhook, metrics.

Memory is ahead of the store by the ops in flight (applied, their records not
yet durable). What a subscriber starts from (a snapshot, "up to date at seq
N") is therefore taken only where memory's state of that CRDT is durable
(:meth:`CrdtService.durable_state`): were the write to fail, the next op would
take the failed op's seq, and a subscriber that was given it would skip the
real one as already held and keep the phantom for good.

If the store fails, memory is ahead of disk: the ops involved are answered
503, further writes are refused, the CRDTs memory holds ahead of the store
are dropped (a read loads them from what is durable: no reader is shown a
write that was refused), and once the store can write again the engine is
rebuilt from what the store holds (PostgreSQL treats an fsync
failure the same way: the buffers are not trusted again). The CRDTs that
must stay in memory (subscribed ones, syncd/residency.py) are read back
before writes resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from syncd.crdt.engine import MAX_BATCH_OPS, MAX_LIST_LIMIT, export_entry
from syncd.crdt.ydoc import DeletedYDocs, YDoc
from syncd.errors import ApiError, StoreUnavailable, bad_request, forbidden, unavailable
from syncd.quotas import measure_unmeasured

if TYPE_CHECKING:
    from syncd.auth.authenticator import Authenticator, Principal
    from syncd.crdt.engine import ApplyResult, Engine, Entry, Plan
    from syncd.hub import Hub
    from syncd.metrics import MergeHistogram, Metrics
    from syncd.quotas import Quotas
    from syncd.residency import Residency
    from syncd.store.base import Recovered, Store
    from syncd.webhooks.dispatcher import WebhookDispatcher

log = logging.getLogger("syncd.service")

# While the store is failing, how often we look whether it can write again.
RECOVERY_POLL_S: Final = 0.2

T = TypeVar("T")

Withdrawal = Callable[["Entry | None"], bool]
"""Whether what a withdrawal takes back is still the principal's, asked of the
CRDT's entry where the op is ordered (see :meth:`CrdtService.apply_ops`)."""


def _always() -> bool:
    return True


class CrdtService:
    def __init__(
        self,
        *,
        engine: Engine,
        store: Store,
        auth: Authenticator,
        hub: Hub,
        metrics: Metrics,
        webhooks: WebhookDispatcher | None,
        reload: Callable[[Recovered], None],
        residency: Residency,
        quotas: Quotas,
    ) -> None:
        self.engine = engine
        self.quotas = quotas
        self.residency = residency
        self.store = store
        self.auth = auth
        self.hub = hub
        self.metrics = metrics
        self.webhooks = webhooks
        self._reload = reload
        """Loads what the store recovered into the engine (App.load_state)."""
        self._degraded = False
        self._recovery: asyncio.Task[None] | None = None
        self._merge: dict[str, MergeHistogram] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._measuring: asyncio.Task[int] | None = None
        self._forgotten: list[tuple[str, str]] = []
        """CRDTs that must stay in memory, dropped at a failed write because
        memory was ahead of the store (:meth:`_forget_unacknowledged`): read
        back after the rebuild."""
        self._writes: set[asyncio.Task[None]] = set()
        """A shared store's writes in flight (see :meth:`_shared_write`)."""
        self.deleted_ydocs = DeletedYDocs()
        """Yjs documents deleted lately, which a Yjs socket's update from a
        stale editor must not create again (:meth:`delete`, syncd/yjs/channel.py)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        # Kept, not asked for per op: on Python 3.11 asyncio.get_running_loop()
        # is a getpid() system call each time.
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop

    @property
    def writable(self) -> bool:
        return not self._degraded and self.store.ready

    @property
    def stages(self) -> bool:
        """Whether ops may be staged and persisted in runs (see :meth:`stage`): true
        for a local store; a shared store (PostgreSQL) orders ops itself."""
        return not self.store.shared

    async def ensure(self, ns: str, crdt_id: str) -> Entry | None:
        """The CRDT in memory (loaded from the store if need be); None if there is none."""
        return await self.residency.ensure(ns, crdt_id)

    async def ensure_for_write(self, ns: str, crdt_id: str) -> Entry | None:
        """:meth:`ensure`, and for a Yjs document whose type depths are not
        known (its first write since it was loaded) those depths read in a
        thread when it is large (``YDoc.read_nesting``): read by the write,
        on the event loop, they held every connection for up to a second.
        Awaited before a write that then awaits nothing until it is applied
        (:meth:`apply_ops`, :meth:`stage`'s callers); anything else costs a
        lookup and one type test."""
        # engine.lookup, not "in engine": Engine.__contains__ is a Python call.
        entry = self.engine.lookup((ns, crdt_id))
        loads = self.store.loads_on_demand
        if entry is None and loads:
            entry = await self.residency.ensure(ns, crdt_id)
        if entry is not None and type(entry.crdt) is YDoc and entry.crdt.nesting_unread:
            await entry.crdt.read_nesting()
            if loads and self.engine.lookup((ns, crdt_id)) is not entry:
                entry = await self.residency.ensure(ns, crdt_id)  # dropped meanwhile: loaded again
        return entry

    async def apply_ops(
        self,
        ns: str,
        crdt_id: str,
        body: Any,
        principal: Principal,
        source: str,
        *,
        marks: dict[str, Any] | None = None,
        most: int = MAX_BATCH_OPS,
        withdrawal: Withdrawal | None = None,
    ) -> ApplyResult:
        """Apply ``body`` as ``principal``, every op or none, in one store
        commit (one transaction on PostgreSQL); ``marks`` are fields the
        server adds to each record (a revert's ``reverts``, syncd/revert.py);
        ``most`` bounds the ops of ``body`` (``Engine.plan``). ``withdrawal``:
        the principal takes back what it wrote itself (a WebSocket's presence
        ``leave``), which its write rules do not decide (one that expired
        since must not keep the entry until its TTL); applied only while
        ``withdrawal(entry)`` holds of the CRDT's entry where the op is
        ordered (on a shared store under the CRDT's lock, once caught up with
        other nodes: a newer write of theirs is seen), else 403 with nothing
        written."""
        store = self.store
        if store.shared and self.quotas.namespaces_on:
            await store.usage(ns)  # fresh enough figures for the check in apply()
        # engine.lookup, not "in engine": Engine.__contains__ is a Python call.
        entry = self.engine.lookup((ns, crdt_id))
        if (entry is None and store.loads_on_demand) or (
            entry is not None and type(entry.crdt) is YDoc
        ):
            # No await from here to apply() on a local store: what is loaded stays.
            await self.ensure_for_write(ns, crdt_id)
        try:
            plan = self.engine.plan(ns, crdt_id, body, most=most)
        except ApiError:
            # 403 first: a plan's refusal can tell what the id holds (its type).
            self.auth.check_may_write(principal, crdt_id)
            raise
        plan.marks = marks
        if withdrawal is None:
            self.auth.check_write(principal, crdt_id, plan.type_name, plan.mask)
        if not self.writable:
            raise unavailable()
        client_id = principal.client_id

        if self.stages:
            # Applied in this step (what was loaded is still here) and queued
            # with it: memory and log move together.
            if withdrawal is not None:
                self._check_withdrawal(plan, withdrawal)
            result = self._timed_apply(plan, client_id)
            await self._once_durable(self._append_soon(result.records), result.records, source)
            return result

        def apply() -> ApplyResult:
            if withdrawal is not None:
                self._check_withdrawal(plan, withdrawal)
            return self._timed_apply(plan, client_id)

        # The store calls apply() when it orders this request: a local store
        # at once, a shared one (PostgreSQL) under the CRDT's row lock, after
        # catching the CRDT up with other nodes. An all-duplicate request
        # still waits for the store: its first answer may not be durable yet,
        # and we never answer before that. An ApiError from apply() (a refused
        # op) passes through with nothing written; StoreUnavailable means the
        # records are not durable.
        def committed(result: ApplyResult) -> None:
            if result.records:
                # Counted before the answer leaves (a scrape right after it sees
                # the op); fanned out after it: see persist().
                self._count(result.records)
                self.loop.call_soon(self._after_durable, result.records, source)

        try:
            return await self._shared_write(store.commit(ns, crdt_id, apply), committed)
        except StoreUnavailable:
            if not store.shared:
                self._enter_degraded()  # memory is ahead of the log
            raise

    def apply_soon(
        self, ns: str, crdt_id: str, body: Any, principal: Principal
    ) -> tuple[ApplyResult, asyncio.Future[None]] | None:
        """:meth:`apply_ops` without a loop step, where nothing must be awaited
        first: a local store and a CRDT in memory (or a store that holds every
        CRDT in memory). Plans, authorizes, applies and queues the records
        now, and returns the result with the future that resolves once they
        are durable; hand both to :meth:`settle` when it is done, and answer
        only after that. None: call :meth:`apply_ops` instead. The op path of
        an HTTP request runs as callbacks, without a task and its coroutines
        (a tenth of a request's cost)."""
        store = self.store
        engine = self.engine
        # engine.lookup, not "in engine": Engine.__contains__ is a Python call.
        entry = engine.lookup((ns, crdt_id))
        if store.shared or (entry is None and store.loads_on_demand):
            return None
        if entry is not None and type(entry.crdt) is YDoc and entry.crdt.nesting_unread:
            return None  # its type depths are read first, in a thread (apply_ops)
        # stage(), inline: once per request.
        try:
            plan = engine.plan(ns, crdt_id, body)
        except ApiError:
            # 403 first: a plan's refusal can tell what the id holds (its type).
            self.auth.check_may_write(principal, crdt_id)
            raise
        self.auth.check_write(principal, crdt_id, plan.type_name, plan.mask)
        if not self.writable:
            raise unavailable()
        result = self._timed_apply(plan, principal.client_id)
        # The records enter the queue in this same loop step: memory and log move together.
        try:
            return result, store.append_soon(result.records)
        except StoreUnavailable:
            self._enter_degraded()  # memory is ahead of the log
            raise
        except Exception:
            log.exception("appending the records of a commit failed")
            self._enter_degraded()
            raise StoreUnavailable() from None

    def settle(
        self, result: ApplyResult, durable: asyncio.Future[None], source: str
    ) -> ApplyResult:
        """After :meth:`apply_soon`'s future is done: ``result`` once its records
        are durable (counted now, fanned out after the caller's answer, as
        :meth:`apply_ops` does); raises ``StoreUnavailable`` when they are not."""
        try:
            durable.result()
        except StoreUnavailable:
            self._enter_degraded()  # memory is ahead of the log
            raise
        if result.records:
            self._count(result.records)
            self.loop.call_soon(self._after_durable, result.records, source)
        return result

    def stage(
        self,
        ns: str,
        crdt_id: str,
        body: Any,
        principal: Principal,
        *,
        marks: dict[str, Any] | None = None,
        measure: bool = True,
        withdrawal: Withdrawal | None = None,
    ) -> ApplyResult:
        """Plan, authorize and apply ``body`` in memory (local stores only).

        The CRDT's caller awaits :meth:`ensure_for_write` first (a large Yjs
        document's type depths, else read here on the loop). The caller must
        hand the records to :meth:`persist` in the same loop
        step (the store's snapshots rely on memory and log moving together),
        and answer only once that returns. Several staged results may share
        one ``persist``: one append, one wait for the group commit. The CRDT
        must have been made resident (:meth:`ensure`) and held there
        (``residency.hold``) by the caller. ``marks`` as for :meth:`apply_ops`;
        ``measure`` as for ``Engine.apply`` (False: the caller stages a run of
        ops as one batch and has ``Engine.measure_if_due`` called after it);
        ``withdrawal`` as for :meth:`apply_ops` (asked of memory, now).
        """
        try:
            plan = self.engine.plan(ns, crdt_id, body)
        except ApiError:
            # 403 first: a plan's refusal can tell what the id holds (its type).
            self.auth.check_may_write(principal, crdt_id)
            raise
        plan.marks = marks
        if withdrawal is None:
            self.auth.check_write(principal, crdt_id, plan.type_name, plan.mask)
        if not self.writable:
            raise unavailable()
        if withdrawal is not None:
            self._check_withdrawal(plan, withdrawal)
        return self._timed_apply(plan, principal.client_id, measure)

    def _check_withdrawal(self, plan: Plan, withdrawal: Withdrawal) -> None:
        """403 unless what ``plan`` takes back is still the principal's."""
        if not withdrawal(self.engine.get(plan.ns, plan.id)):
            raise forbidden(
                "the entry is no longer this connection's to take back"
                " (written since by another connection, or its CRDT deleted)"
            )

    async def persist(self, records: list[dict[str, Any]], source: str) -> None:
        """Make staged ``records`` durable, then (after the caller's answer) fan out,
        even if the caller is cancelled meanwhile (see :meth:`_once_durable`)."""
        await self._once_durable(self._append_soon(records), records, source)

    def _timed_apply(self, plan: Plan, client_id: int, measure: bool = True) -> ApplyResult:
        started = time.perf_counter()
        quotas = self.quotas
        if quotas.on:
            # Checked before anything is applied: a refused op changes nothing.
            usage = self.store.usage_now(plan.ns) if quotas.namespaces_on else None
            growth = quotas.check(plan, usage, client_id)
            result = self.engine.apply(plan, client_id, measure=measure)
            quotas.applied(plan, growth)
        else:
            result = self.engine.apply(plan, client_id, measure=measure)
            if measure:
                # Growth counted all the same: the memory budget's estimate
                # follows it (measured only every RESIZE_EVERY_OPS ops, large
                # ops kept CRDTs in memory far past the budget). A run staged
                # as one batch (a revert's) is measured once after it.
                quotas.applied(plan, quotas.growth(plan))
        residency = self.residency
        if self.engine.resident_bytes > residency.budget_bytes:
            residency.check()
        ns = plan.ns
        merge = self._merge.get(ns)
        if merge is None:
            merge = self._merge[ns] = self.metrics.hot.merge_histogram(ns)
        merge.observe(time.perf_counter() - started)
        return result

    # -- the cluster's Sink: records other nodes made durable -------------------

    def position(self, ns: str, crdt_id: str) -> tuple[str, int] | None:
        entry = self.engine.get(ns, crdt_id)
        return None if entry is None else (entry.epoch, entry.seq)

    def apply_remote(self, record: dict[str, Any]) -> bool:
        """A durable record made elsewhere (another node): apply and fan out.

        Raises ``GapError`` when seqs are missing; the caller fetches them first.
        Returns False for a record this node already holds.
        """
        engine = self.engine
        if not engine.replay(record):
            return False
        if engine.resident_bytes > self.residency.budget_bytes:
            self.residency.check()  # a node that only replays keeps its budget too
        if self.hub.subscribed(record["ns"], record["id"]):
            # Nobody to tell otherwise: one who subscribes later starts from
            # the engine or the store, which have this record already.
            self.publish_soon(record)
        return True

    def wanted(self, ns: str, crdt_id: str) -> bool:
        return self.hub.subscribed(ns, crdt_id)

    def in_use(self) -> list[tuple[str, str]]:
        """The CRDTs the engine holds, then those with subscribers (held or not)."""
        held = [(entry.ns, entry.id) for entry in self.engine.lru()]
        return held + self.hub.subscribed_keys()

    def replay_quietly(self, record: dict[str, Any]) -> None:
        self.engine.replay(record)

    def forget(self, ns: str, crdt_id: str) -> None:
        self.engine.delete(ns, crdt_id)
        self.quotas.forget(ns, crdt_id)

    def load_snapshot(self, entry: dict[str, Any], *, announce: bool) -> None:
        engine = self.engine
        engine.import_entry(entry)
        if engine.resident_bytes > self.residency.budget_bytes:
            self.residency.check()
        if announce:
            self.publish_soon(engine.snapshot_delta(entry["ns"], entry["id"]))

    def export(self, ns: str, crdt_id: str) -> dict[str, Any]:
        entry = self.engine.get(ns, crdt_id)
        if entry is None:
            raise KeyError(f"{ns}/{crdt_id} is not in the engine")
        return export_entry(entry)

    def publish_soon(self, delta: dict[str, Any]) -> None:
        """Broadcast ``delta`` through the one FIFO every delta takes (see
        apply_ops), so subscribers see each CRDT's deltas in the order the
        engine applied them, local and remote alike."""
        self.loop.call_soon(self.hub.publish, delta)

    async def delete(self, ns: str, crdt_id: str) -> bool:
        if not self.writable:
            raise unavailable()
        entry = await self.residency.ensure(ns, crdt_id)
        if entry is None:
            return False
        if isinstance(entry.crdt, YDoc):
            # Taken before the engine forgets it: a stale editor's copy of the
            # document is told from a new one by it (DeletedYDocs). Kept from
            # now on: were the delete to fail, the document exists and is
            # written to as before (only a write that would create it is asked).
            self.deleted_ydocs.remember(ns, crdt_id, entry.crdt.state_vector())
        if self.stages:
            deleted = self.engine.delete(ns, crdt_id)
            if deleted is None:
                return False
            self.quotas.forget(ns, crdt_id)
            record = deleted
        else:
            # A shared store ends the life under the CRDT's lock and drops it
            # from memory there, after the commit (Follower.ended). Dropped
            # here, a write batch already holding that lock read the life
            # back from the rows and fanned its ops out again, or applied to
            # no entry and started a life the delete then ended.
            record = {"kind": "deleted", "ns": ns, "id": crdt_id}
        key = (ns, crdt_id)
        done = self.loop.create_future()
        deleting = self.residency.deleting
        deleting[key] = done

        def finished(_: object = None) -> None:
            done.set_result(None)
            if deleting.get(key) is done:
                del deleting[key]

        if self.stages:
            try:
                durable = self._append_soon([record])
            except BaseException:
                finished()
                raise
            # Loads of the key wait until the delete is durable, not only while
            # its caller waits (a caller whose client went away is cancelled).
            durable.add_done_callback(finished)
            await self._once_durable(durable, [], "", lambda: self.publish_soon(record))
            return True

        async def write() -> None:
            try:
                await self._persist([record])
            finally:
                finished()

        await self._shared_write(write(), lambda _: self.publish_soon(record))
        return True

    async def list_ids(
        self,
        ns: str,
        *,
        prefix: str = "",
        after: str | None = None,
        limit: int = 100,
        visible: Callable[[str], bool] = lambda _: True,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of ``{"id","type","seq"}`` sorted by id, and the cursor of the
        next page (None when no readable CRDT follows)."""
        if type(limit) is not int or not 1 <= limit <= MAX_LIST_LIMIT:
            raise bad_request(f"limit: must be an integer from 1 to {MAX_LIST_LIMIT}")
        page: list[dict[str, Any]] = []
        cursor = after
        # One more row than the page tells whether a next page exists; when
        # the caller may not read some of them, the rest is read in whole
        # pages (a store page of 1,000 rows costs ~3 ms, of 11 a few µs).
        ask = min(limit + 1, MAX_LIST_LIMIT)
        while True:
            rows = await self.store.list_ids(ns, prefix, cursor, ask)
            for crdt_id, type_name, seq in rows:
                if not visible(crdt_id):
                    continue
                if len(page) == limit:
                    return page, page[-1]["id"]
                # The store's seq: memory's may count ops still in flight
                # (an answer comes once they are durable, and the store holds
                # them by then, so a writer still reads its own writes).
                page.append({"id": crdt_id, "type": type_name, "seq": seq})
            if len(rows) < ask:
                return page, None
            cursor = rows[-1][0]
            ask = MAX_LIST_LIMIT
            # A caller who reads few of the ids goes on over every page of
            # the namespace, and a local store answers each without waiting:
            # let the loop's other work run between them.
            await asyncio.sleep(0)

    def _append_soon(self, records: list[dict[str, Any]]) -> asyncio.Future[None]:
        """Queue ``records`` on a local store now; the future of their durability."""
        try:
            return self.store.append_soon(records)
        except StoreUnavailable:
            self._enter_degraded()  # memory is ahead of the log
            raise
        except Exception:
            log.exception("appending records failed")
            self._enter_degraded()
            raise StoreUnavailable() from None

    async def _once_durable(
        self,
        durable: asyncio.Future[None],
        records: list[dict[str, Any]],
        source: str,
        then: Callable[[], None] | None = None,
    ) -> None:
        """Wait for ``durable``, the future of queued ``records`` (raises
        ``StoreUnavailable`` when they are not durable). What follows their
        durability (the count, the fan-out to subscribers and webhooks, and
        ``then()``) runs when they are, whether or not the caller still waits:
        a caller cancelled meanwhile (its client reset the connection) leaves
        its records on their way to disk all the same, and a subscriber that
        missed their deltas would have a gap. The caller resumes before the
        fan-out and writes its ack or response first, so a writer sees its
        ack before its own delta; call_soon keeps deltas in durable order."""
        answered: asyncio.Future[None] = self.loop.create_future()

        def on_durable(future: asyncio.Future[None]) -> None:
            exc = future.exception()
            if exc is not None:
                if not isinstance(exc, StoreUnavailable):
                    log.error("appending records failed: %r", exc)
                    exc = StoreUnavailable()
                self._enter_degraded()  # memory is ahead of the log
                if not answered.done():
                    answered.set_exception(exc)
                return
            if not answered.done():
                answered.set_result(None)
            if records:
                self._count(records)  # before the caller's answer
                self.loop.call_soon(self._after_durable, records, source)
            if then is not None:
                then()

        durable.add_done_callback(on_durable)
        await answered

    async def _shared_write(self, write: Awaitable[T], then: Callable[[T], None]) -> T:
        """Await ``write`` (a commit on a shared store) in a task of its own, and
        ``then(result)`` once it succeeds, whether or not the caller still waits:
        a caller cancelled meanwhile (its client went away) leaves the write
        going on, and a committed op whose fan-out was skipped would be a gap
        for this node's subscribers (:meth:`_once_durable` is the local
        stores' counterpart). The task resumes where the caller would have
        (in the step the store answers, under the CRDT's lock) and wakes the
        caller before it queues what ``then`` queues: the writer's answer
        first, the fan-out in seq order as before."""
        answered: asyncio.Future[T] = self.loop.create_future()

        async def run() -> None:
            try:
                result = await write
            except BaseException as exc:
                if not answered.done():
                    if isinstance(exc, asyncio.CancelledError):
                        answered.cancel()
                    else:
                        answered.set_exception(exc)
                return
            if not answered.done():
                answered.set_result(result)
            then(result)

        task = self.loop.create_task(run())
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
        return await answered

    # -- what a subscriber starts from --------------------------------------------

    def durable_now(self, ns: str, crdt_id: str) -> bool:
        """Whether what memory holds of the CRDT is durable, so that a subscriber
        may be given it (a snapshot, or "up to date" at its seq) now. False while
        an op or a delete of it is in flight, and on a local store while memory
        may be ahead of the log (a failed write, until rebuilt). A CRDT not in
        memory has nothing in flight."""
        store = self.store
        if (ns, crdt_id) in self.residency.deleting:
            return False
        if not store.shared and not self.writable:
            return False
        entry = self.engine.get(ns, crdt_id)
        # A local store holds the seq once its record is durable; a shared one
        # when no commit is under way on the CRDT (it applies under its lock).
        return entry is None or store.holds(ns, crdt_id, entry.epoch, entry.seq)

    async def durable_state(
        self,
        ns: str,
        crdt_id: str,
        take: Callable[[], T],
        alive: Callable[[], bool] = _always,
    ) -> T | None:
        """``take()`` (it reads memory's state of the CRDT, in the step it is
        called) where that state is durable, and return what it took once it is;
        None if ``alive()`` turns False first (the subscriber went away). Loads
        the CRDT first, as :meth:`ensure` (an ``ApiError`` passes through).

        On a local store with ops in flight, the state is taken now and returned
        once a barrier queued behind them is durable (a state taken after would
        have ops of its own in flight, under a steady stream of writes for
        ever). If they fail, nothing taken is returned: once memory is rebuilt
        from the store, the state is taken again. On a shared store the state
        is taken under the CRDT's lock, where no commit is under way on it."""
        store = self.store
        key = (ns, crdt_id)
        while True:
            await self.residency.ensure(ns, crdt_id)
            if not alive():
                return None
            if self.durable_now(ns, crdt_id):
                return take()
            deleting = self.residency.deleting.get(key)
            if deleting is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(deleting)  # then the CRDT is loaded again
            elif store.shared:
                taken = await self._take_committed(key, take)
                if taken is not None:
                    return taken[0]
            elif not self.writable:
                await asyncio.sleep(RECOVERY_POLL_S)  # memory is rebuilt (_recover)
            else:
                state = take()
                try:
                    # Every record applied before now was queued before this
                    # barrier; a failed write fails everything queued behind it.
                    await store.append_soon([])
                except StoreUnavailable:
                    # A failed write (memory is rebuilt, then taken again), or a
                    # store that refuses before it is told (closing): either
                    # way not at once, which would spin the loop.
                    await asyncio.sleep(RECOVERY_POLL_S)
                    continue
                return state if alive() else None

    async def durable_read(
        self,
        ns: str,
        crdt_id: str,
        take: Callable[[], T],
        alive: Callable[[], bool] = _always,
    ) -> T | None:
        """What a reader is shown (an HTTP read, a Yjs step 2, a history read):
        ``take()`` where the CRDT's state is durable, as :meth:`durable_state`,
        never showing an op whose write fails; None when ``alive()`` turns
        False first. The CRDT is loaded first if need be (an ``ApiError``
        passes through, 503 when the store cannot read it).

        Unlike a subscription's start, a read does not wait out a local
        store's failure: the CRDTs memory held ahead of the store were dropped
        at the failure (:meth:`_forget_unacknowledged`) and a load reads what
        is durable, so the state is taken where the store holds it; one it
        does not hold is refused with 503."""
        store = self.store

        def writing() -> bool:
            return alive() and (store.shared or self.writable)

        while True:
            taken = await self.durable_state(ns, crdt_id, lambda: (take(),), writing)
            if taken is not None:
                return taken[0]
            if not alive():
                return None
            await self.ensure(ns, crdt_id)
            entry = self.engine.get(ns, crdt_id)
            if entry is None or store.holds(ns, crdt_id, entry.epoch, entry.seq):
                return take()
            if not writing():
                raise unavailable("this CRDT's latest ops are not durable; the store is failing")
            # Writes resumed meanwhile: wait for the ops in flight as before.

    async def _take_committed(self, key: tuple[str, str], take: Callable[[], T]) -> tuple[T] | None:
        """``(take(),)`` under the CRDT's lock on a shared store, where memory holds
        what is committed of it; None when it must be loaded again first (a
        failed commit forgot it, or a delete of it began meanwhile)."""
        locks = getattr(self.store, "locks", None)
        if locks is None:  # a shared store without per-CRDT locks: look again soon
            await asyncio.sleep(RECOVERY_POLL_S)
            return None
        await locks.acquire(key)
        try:
            if key not in self.residency.deleting and key in self.engine:
                return (take(),)
        finally:
            locks.release(key)
        return None

    async def _persist(self, records: list[dict[str, Any]]) -> None:
        try:
            await self.store.append(records)
        except StoreUnavailable:
            # A shared store's failed write leaves memory behind the rows at
            # worst, never ahead of them: the CRDTs it touched were dropped
            # (a delete's CRDT stays as the rows still have it) and are read back
            # from the rows on next use, as after a failed commit. Only a
            # local store's log can be behind what memory holds.
            if not self.store.shared:
                self._enter_degraded()
            raise
        except ApiError:
            self._enter_degraded()
            raise
        except Exception:
            log.exception("store append failed")
            self._enter_degraded()
            raise unavailable() from None

    def _count(self, records: list[dict[str, Any]]) -> None:
        count_op = self.metrics.hot.count_op
        for record in records:
            op = record["op"]
            count_op(record["ns"], record["id"], op.get("op", "") if isinstance(op, dict) else "")

    def _after_durable(self, records: list[dict[str, Any]], source: str) -> None:
        webhooks = self.webhooks
        self.hub.publish_many(records)
        if webhooks is None:
            return
        for record in records:
            op = record["op"]
            op_name = op.get("op", "") if isinstance(op, dict) else ""
            webhooks.enqueue(
                {
                    "ns": record["ns"],
                    "crdt_id": record["id"],
                    "source": source,
                    "seq": record["seq"],
                    # The CRDT's life: a deleted id written to again starts at seq 1.
                    "epoch": record.get("epoch"),
                    "op_type": op_name,
                    "client_id": record["client_id"],
                    "timestamp_ms": record["ts"],
                    # Absent from records without one (syncd/crdt/engine.py).
                    "origin": record.get("origin"),
                }
            )

    def _enter_degraded(self) -> None:
        if self._degraded:
            return
        self._degraded = True
        log.error(
            "storage failed: refusing writes until it recovers; state will be rebuilt from disk"
        )
        self._forget_unacknowledged()
        self._recovery = asyncio.get_running_loop().create_task(self._recover())

    def _forget_unacknowledged(self) -> None:
        """Drop from memory the CRDTs that are ahead of the store (records of
        theirs failed, or were queued behind the failure and fail with it), so
        that no read serves a write the rebuild is about to remove: a read of
        one loads it again from the store, which holds only what is durable
        (an HTTP GET, a Yjs step 1). Once per failure, off the op path; memory
        of the others is what the store holds. A store that cannot load on
        demand keeps them (nothing else could serve them until the rebuild).
        Those that must stay in memory are read back after the rebuild."""
        store = self.store
        if store.shared or not store.loads_on_demand:
            return
        engine = self.engine
        residency = self.residency
        holds = store.holds
        for entry in engine.lru():
            ns, crdt_id = entry.ns, entry.id
            if not holds(ns, crdt_id, entry.epoch, entry.seq):
                if residency.must_stay(ns, crdt_id):
                    self._forgotten.append((ns, crdt_id))
                engine.drop(ns, crdt_id)

    async def _recover(self) -> None:
        store = self.store
        while True:
            await asyncio.sleep(RECOVERY_POLL_S)
            if not store.ready:
                continue
            try:
                recovered = await store.reload()
            except Exception:
                log.exception("rebuilding state from storage failed; retrying")
                continue
            # The rebuild forgets every CRDT, those that must stay in memory too
            # (a subscriber's: a Yjs peer's step 1 was answered from a document
            # that was not there, an empty update, after every recovery).
            residency = self.residency
            now = self.engine.now_ms()
            pinned = [(e.ns, e.id) for e in self.engine.lru() if residency.pinned(e, now)]
            # And those dropped at the failure (_forget_unacknowledged) and not read since.
            pinned += [
                key
                for key in self._forgotten
                if key not in self.engine and residency.must_stay(*key)
            ]
            self._forgotten = []
            self._reload(recovered)
            if self.store.loads_on_demand:
                await self._load_again(pinned)
            self._degraded = False
            log.warning("storage recovered; state rebuilt from disk")
            return

    async def _load_again(self, keys: list[tuple[str, str]]) -> None:
        """Read ``keys`` back from the store after a rebuild, all at once (writes
        are still refused meanwhile); one that cannot be read is logged, and
        loads on its next use as any other."""
        residency = self.residency

        async def load(ns: str, crdt_id: str) -> None:
            try:
                await residency.ensure(ns, crdt_id)
            except Exception as exc:
                log.warning("%s/%s: not read back after the rebuild: %r", ns, crdt_id, exc)

        await asyncio.gather(*(load(ns, crdt_id) for ns, crdt_id in keys))

    def measure_sizes(self) -> None:
        """Measure, in the background, the CRDTs whose size the store lost (a crash)."""
        if self.store.unmeasured(1):
            self._measuring = self.loop.create_task(
                measure_unmeasured(self.store, self.engine), name="syncd-measure-sizes"
            )

    async def close(self) -> None:
        if self._measuring is not None:
            self._measuring.cancel()
            with contextlib.suppress(BaseException):
                await self._measuring
        await self.residency.close()
        if self._recovery is not None:
            self._recovery.cancel()
            with contextlib.suppress(BaseException):
                await self._recovery
