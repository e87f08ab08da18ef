"""Which CRDTs are in memory: loaded on first use, let go when memory is short.

Theory of operation
-------------------
The engine holds the CRDTs in use; the store holds them all. Every path that
uses a CRDT (a read, an op, a subscription, a history read, a Yjs join, a
delete) first calls :meth:`Residency.ensure`. A resident CRDT costs a dict
lookup and moves to the recent end of the engine's use order; any other is
read from the store (``Store.load``: its checkpoint and the ops after it)
once, however many callers ask at the same time, and its load time counted.

*The budget.* ``SERVICE_MEMORY_BUDGET_MB`` bounds the engine's estimate of
resident state (``Engine.resident_bytes``). Past it, an eviction pass runs
soon (never inside the caller's step): it picks the least recently used
CRDTs that may go until the estimate would be :data:`EVICT_TO` of the
budget, waits for the store's barrier (``append([])``: everything applied
before it is durable and readable), and drops those that did not change
meanwhile and that the store says it can rebuild exactly (``Store.holds``).
A pass that leaves the estimate over the budget (CRDTs pinned, see below, or
changed meanwhile) is followed by another only once the estimate grows by the
headroom a pass frees, or after :data:`RETRY_S` (then at once if it had found
CRDTs that may go, else at the next op or load): a pass scans every resident
CRDT, and one per op would be spent on CRDTs that cannot go. No pass starts
while the store refuses writes (``Store.ready`` False: a full disk): its
barrier would fail, so it could free nothing.

A CRDT stays while:

- it has subscribers (SSE, WebSocket, Yjs): deltas are applied to it;
- its presence has entries that have not expired: a disconnect must still
  find them to leave;
- it changed since the pass chose it (ops in flight);
- a caller holds it (:meth:`Residency.hold`) between loading it and using
  it across an await (a WebSocket read's run of ops).

A store that cannot load on demand (``loads_on_demand`` False) keeps every
CRDT resident: nothing is evicted, and ``ensure`` finds what the engine has.

*Deletes.* On a local store a delete drops the CRDT from memory at once,
before its record is durable; on PostgreSQL it stays until the store ends
its life under the CRDT's lock, after the commit (a write batch holding the
lock then still finds it). Either way the store shows the old life until
the delete is durable, so a load of that key waits for the delete to finish
(``deleting``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final

from syncd.crdt.engine import Entry
from syncd.crdt.presence import Presence
from syncd.crdt.ydoc import YDoc
from syncd.errors import StoreUnavailable, unavailable

if TYPE_CHECKING:
    from syncd.crdt.engine import Engine
    from syncd.store.base import Store

log = logging.getLogger("syncd.residency")

EVICT_TO: Final = 0.9
"""An eviction pass frees down to this share of the budget, so the next one
is not due at the next op (passes are batched, like a GC's headroom)."""

RETRY_S: Final = 1.0
"""After a pass that left the estimate over the budget (CRDTs pinned, or
changed while the pass waited), when a pass is tried again though nothing
grew: the subscribers that pinned them may have left by then."""

DEFAULT_MEMORY_BUDGET_MB: Final = 512
"""Resident CRDT state by default: a quarter of a small 2 GB host, room for
about half a million small counters or 70,000 2 KB texts (estimated sizes;
docs/operations.md#sizing-a-node)."""

LOAD_THREAD_BYTES: Final = 64 * 1024
"""A Yjs document whose stored copy (its checkpoint's update and the
updates after it, base64) is this large or larger is built in a worker
thread (:func:`_builder`), not on the event loop, on a local store (on a
shared one the load must be installed in the step that read it: see
:meth:`Residency._load`): Yrs's decode of a
1.4 MB document and the replay after it took 0.3-0.6 s of the loop's CPU,
every connection held meanwhile. Smaller ones load in a few milliseconds,
less than the thread's hand-off is worth. pycrdt holds the GIL inside
each Yrs call, so the loop still waits out the longest one (the
checkpoint's apply, about 0.2 s at 1.4 MB); it runs between them, and
between the Python steps at the interpreter's switch interval."""

_builders: list[ThreadPoolExecutor] = []
"""The one thread that builds large Yjs documents, made when first needed:
the work holds the GIL, so a second thread would only slow the loop
further, and one at a time bounds the memory of loads under way."""

Key = tuple[str, str]


def _builder() -> ThreadPoolExecutor:
    if not _builders:
        _builders.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="syncd-load"))
    return _builders[0]


def _builds_in_thread(base: dict[str, Any] | None, records: Sequence[dict[str, Any]]) -> bool:
    """Whether a stored copy is a Yjs document of :data:`LOAD_THREAD_BYTES`
    or more (one type test for any other CRDT)."""
    if base is not None:
        if base.get("type") != YDoc.TYPE:
            return False
        size = len(base["state"]["update"])
    elif records and records[0].get("type") == YDoc.TYPE:
        size = 0
    else:
        return False
    for record in records:
        if size >= LOAD_THREAD_BYTES:
            break
        op = record.get("op")
        if isinstance(op, dict):
            update = op.get("update")
            size += len(update) if isinstance(update, str) else 0
    return size >= LOAD_THREAD_BYTES


class LoadAbandoned(Exception):
    """The caller loading a CRDT was cancelled before the load finished: each
    caller that waited for that load tries again itself."""


class ResidencyStats:
    """Counters for the metrics (service_engine_*)."""

    __slots__ = ("evictions", "loads", "misses", "passes")

    def __init__(self) -> None:
        self.loads = 0
        """CRDTs read from the store."""
        self.misses = 0
        """Loads that found no CRDT (an unknown id)."""
        self.evictions = 0
        self.passes = 0
        """Eviction passes started (not exported: each is a scan of the resident CRDTs)."""


class Residency:
    def __init__(
        self,
        *,
        engine: Engine,
        store: Store,
        budget_bytes: int,
        subscribed: Callable[[str, str], bool],
        on_load: Callable[[float], None] | None = None,
    ) -> None:
        if budget_bytes < 1:
            raise ValueError("the memory budget must be positive")
        self.engine = engine
        self.store = store
        self.budget_bytes = budget_bytes
        self._subscribed = subscribed
        self._loading: dict[Key, asyncio.Future[Entry | None]] = {}
        self.deleting: dict[Key, asyncio.Future[None]] = {}
        """Keys whose delete is not durable yet (loads wait for it)."""
        self._pass: asyncio.Task[None] | None = None
        self._kept: int | None = None
        """The estimate the last pass left over the budget, until its retry:
        another pass starts before that only once the estimate grew past it
        by the headroom a pass frees (1 - EVICT_TO of the budget). Without
        this, CRDTs pinned past the budget made every op start a pass that
        scanned every resident CRDT and freed nothing."""
        self._retry: asyncio.TimerHandle | None = None
        self._held: dict[Key, int] = {}
        self.stats = ResidencyStats()
        self.on_load = on_load
        """Called with each load's seconds (the metrics' histogram)."""
        self.loader: Callable[[str, str], Awaitable[None]] | None = None
        """Where a store shared by a cluster loads from instead of ``Store.load``:
        the cluster layer, which brings the engine's entry up to the tables
        and tells subscribers what they lack (``Replicator.load``)."""

    def hold(self, ns: str, crdt_id: str) -> None:
        """Keep this CRDT in memory (once resident) until :meth:`release`."""
        key = (ns, crdt_id)
        self._held[key] = self._held.get(key, 0) + 1

    def release(self, ns: str, crdt_id: str) -> None:
        key = (ns, crdt_id)
        count = self._held.get(key, 0) - 1
        if count > 0:
            self._held[key] = count
        else:
            self._held.pop(key, None)

    # -- loading ----------------------------------------------------------------

    async def ensure(self, ns: str, crdt_id: str) -> Entry | None:
        """The CRDT, resident now; None when the store has none."""
        entry = self.engine.touch(ns, crdt_id)
        if entry is not None or not self.store.loads_on_demand:
            return entry
        key = (ns, crdt_id)
        pending = self._loading.get(key)
        if pending is not None:
            try:
                found = await asyncio.shield(pending)
            except LoadAbandoned:
                return await self.ensure(ns, crdt_id)  # this waiter loads it
            # This waiter resumes steps after the load: an eviction pass may
            # have let the CRDT go meanwhile, and a caller that went on with
            # the entry gone would plan on nothing and start a new life over
            # the stored one. What we return must be resident now.
            entry = self.engine.touch(ns, crdt_id)
            if entry is not None or found is None:
                return entry
            return await self.ensure(ns, crdt_id)
        future: asyncio.Future[Entry | None] = asyncio.get_running_loop().create_future()
        self._loading[key] = future
        try:
            entry = await self._load(ns, crdt_id)
        except BaseException as exc:
            if not future.done():
                # The loading caller's cancellation (its client went away) is
                # its own: the waiters load the CRDT themselves instead of
                # raising CancelledError in tasks nobody cancelled.
                cancelled = isinstance(exc, asyncio.CancelledError)
                future.set_exception(LoadAbandoned() if cancelled else exc)
                future.exception()  # retrieved: the waiters (if any) raise it
            raise
        finally:
            self._loading.pop(key, None)
        future.set_result(entry)
        return entry

    async def _load(self, ns: str, crdt_id: str) -> Entry | None:
        key = (ns, crdt_id)
        deleting = self.deleting.get(key)
        if deleting is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(deleting)
        started = time.perf_counter()
        engine = self.engine
        stats = self.stats
        if self.loader is not None:
            await self.loader(ns, crdt_id)
            entry = engine.touch(ns, crdt_id)
            if entry is None:
                stats.misses += 1
                return None
            stats.loads += 1
            if self.on_load is not None:
                self.on_load(time.perf_counter() - started)
            self.check()
            return entry
        loaded = await self.store.load(ns, crdt_id)
        entry = engine.touch(ns, crdt_id)
        if entry is not None:
            return entry  # made meanwhile (its first op)
        if loaded is None:
            stats.misses += 1
            return None
        base, records = loaded
        try:
            # Not on a shared store: its load hands over the entry in the
            # step that releases the CRDT's lock, so that what the cluster
            # layer heard meanwhile applies to it (PostgresStore.load); an
            # await here, while the thread builds, let those ops go to a CRDT
            # not yet resident, and the entry came up without them.
            if not self.store.shared and _builds_in_thread(base, records):
                entry = await self._build(ns, crdt_id, base, records)
            else:
                entry = engine.load(ns, crdt_id, base, records)
        except Exception as exc:
            # A gap, or a record the engine cannot apply (a damaged or foreign
            # one: a TypeError from a delta of the wrong shape). What was
            # applied before it must not stay: served as the whole CRDT, it
            # showed an older state and took new ops at seqs the store holds.
            log.error("%s/%s: the store's copy cannot be loaded: %r", ns, crdt_id, exc)
            engine.drop(ns, crdt_id)
            raise unavailable(f"{ns}/{crdt_id} cannot be read from storage") from None
        stats.loads += 1
        if self.on_load is not None:
            self.on_load(time.perf_counter() - started)
        self.check()
        return entry

    async def _build(
        self,
        ns: str,
        crdt_id: str,
        base: dict[str, Any] | None,
        records: Sequence[dict[str, Any]],
    ) -> Entry | None:
        """``Engine.load`` in a worker thread, into an engine of its own that
        nothing else sees, then made resident here (:data:`LOAD_THREAD_BYTES`).
        Nothing applies to the CRDT meanwhile: every writer and reader of a
        CRDT that is not resident waits for its load (:meth:`ensure`)."""
        engine = self.engine
        detached = engine.detached()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(_builder(), detached.load, ns, crdt_id, base, records)
        entry = engine.touch(ns, crdt_id)
        if entry is not None:
            return entry  # made meanwhile (its first op), as after store.load
        return engine.adopt(detached, ns, crdt_id)

    # -- evicting -----------------------------------------------------------------

    def check(self) -> None:
        """Start an eviction pass if the resident estimate is past the budget
        (and, after a pass that could not bring it under, past what it left)."""
        resident = self.engine.resident_bytes
        budget = self.budget_bytes
        if resident <= budget or self._pass is not None or not self.store.loads_on_demand:
            return
        if not self.store.ready:
            # A pass frees nothing while the store refuses writes: its barrier
            # fails (and each failure was a stack trace in the log, one per load
            # and per RETRY_S for the whole outage). The first op or load once
            # the store writes again starts one.
            return
        kept = self._kept
        if kept is not None and resident - kept <= budget - int(budget * EVICT_TO):
            return  # nothing new to free since: the retry tries again
        self.stats.passes += 1
        self._pass = asyncio.get_running_loop().create_task(self._evict(), name="syncd-eviction")

    def must_stay(self, ns: str, crdt_id: str) -> bool:
        """Whether this CRDT must be in memory whenever it exists: it has
        subscribers, or a caller holds it."""
        return (ns, crdt_id) in self._held or self._subscribed(ns, crdt_id)

    def pinned(self, entry: Entry, now_ms: int) -> bool:
        """Whether ``entry`` must stay in memory now."""
        if (entry.ns, entry.id) in self._held or self._subscribed(entry.ns, entry.id):
            return True
        crdt = entry.crdt
        return isinstance(crdt, Presence) and crdt.live_until() > now_ms

    def candidates(self) -> list[tuple[Entry, int]]:
        """Least recently used CRDTs that may go, with their seqs, enough to bring
        the estimate down to :data:`EVICT_TO` of the budget."""
        engine = self.engine
        target = int(self.budget_bytes * EVICT_TO)
        now = engine.now_ms()
        chosen: list[tuple[Entry, int]] = []
        freed = 0
        for entry in engine.lru():
            if engine.resident_bytes - freed <= target:
                break
            if self.pinned(entry, now):
                continue
            engine.resize(entry)  # the estimate may be stale: the pass frees by the fresh one
            chosen.append((entry, entry.seq))
            freed += entry.size
        return chosen

    def let_go(self, chosen: list[tuple[Entry, int]]) -> None:
        """Drop the :meth:`candidates` that did not change since they were
        chosen, may still go, and that the store rebuilds exactly (the pass's
        last step, once the store's barrier returned)."""
        engine = self.engine
        now = engine.now_ms()
        store = self.store
        for entry, seq in chosen:
            ns, crdt_id = entry.ns, entry.id
            if (
                engine.get(ns, crdt_id) is entry
                and entry.seq == seq
                and not self.pinned(entry, now)
                and store.holds(ns, crdt_id, entry.epoch, seq)
            ):
                engine.drop(ns, crdt_id)
                self.stats.evictions += 1

    async def _evict(self) -> None:
        chosen: list[tuple[Entry, int]] = []
        try:
            chosen = self.candidates()
            if chosen:
                # Everything applied before this point is durable (and readable
                # by load) once the barrier returns.
                await self.store.append([])
                self.let_go(chosen)
        except StoreUnavailable as exc:
            # The store began refusing writes during the pass: a refusal the
            # service expects (and logs where it starts), not a bug to trace.
            log.warning("an eviction pass freed nothing: %s", exc.message)
        except Exception:
            log.exception("an eviction pass failed; the next one tries again")
        finally:
            self._pass = None
            self._after_pass(bool(chosen))

    def _after_pass(self, chose: bool) -> None:
        resident = self.engine.resident_bytes
        if resident <= self.budget_bytes:
            self._kept = None
            return
        # Still over: CRDTs pinned, or changed while the pass waited.
        self._kept = resident
        if self._retry is None:
            loop = asyncio.get_running_loop()
            self._retry = loop.call_later(RETRY_S, self._try_again, chose)

    def _try_again(self, chose: bool) -> None:
        self._retry = None
        self._kept = None
        if chose:
            # Those that changed meanwhile may go now. A pass that found every
            # CRDT pinned is not repeated while idle: the next op or load
            # starts one (the subscribers may have left by then).
            self.check()

    async def close(self) -> None:
        task = self._pass
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if self._retry is not None:
            self._retry.cancel()  # no pass on a closed store
            self._retry = None
        # Measure what changed since its last measure, so the store keeps
        # (and a clean stop saves) every size as it is (the quotas).
        engine = self.engine
        for entry in engine.lru():
            if entry.grown or entry.unsized_ops:
                engine.resize(entry)


__all__ = [
    "DEFAULT_MEMORY_BUDGET_MB",
    "EVICT_TO",
    "LOAD_THREAD_BYTES",
    "RETRY_S",
    "LoadAbandoned",
    "Residency",
    "ResidencyStats",
]
