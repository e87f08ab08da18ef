"""The backends the store contract runs against, each behind one small harness.

A harness builds its store the way ``App`` does (the same snapshot source; for
a shared store the cluster layer, ``Replicator``, as its ``Follower``, with
the service as the replicator's sink), keeps an ``Engine`` over it and
sends requests through it as ``CrdtService.apply_ops`` does: make the CRDT
resident (``Store.load``, its size reported), plan, then ``Store.commit``
with an ``apply`` that applies the plan in the engine and reports the
CRDT's size (``Store.note_size``, as the quotas measure it). Beyond that it
knows the few things only its backend can do: restart on the same data,
make writes fail and heal them, and drop the history that retention no
longer asks for.

What a backend legitimately does differently is a field of :class:`Traits`;
the tests assert on it and skip nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final

from nacl.signing import SigningKey

from syncd.auth.authenticator import Authenticator
from syncd.cluster.replicator import Replicator
from syncd.crdt.engine import ApplyResult, Engine, Plan
from syncd.hub import Hub
from syncd.metrics import Metrics
from syncd.quotas import Limits, Quotas
from syncd.residency import Residency
from syncd.service import CrdtService
from syncd.store.base import Recovered, Store
from syncd.store.embedded.store import FileStore
from syncd.store.history_index import Retention
from syncd.store.memory import MemoryStore
from syncd.store.postgres import PostgresStore
from tests.pgserver import ThrowawayPostgres
from tests.store.support import ENOSPC, Faults, faulty_opener

NS: Final = "n"
CLIENT: Final = 7
RETAIN_OPS: Final = 8
"""Every store here keeps history for this many ops: small, so that the
expiry test gets past it with a few hundred ops."""
PG_SNAPSHOT_EVERY: Final = 100
"""PostgreSQL writes a CRDT's snapshot (and trims its history) each time its
seq crosses a multiple of this."""
PROBE_S: Final = 0.02
"""How often a failed FileStore tries its disk again."""
WAIT_S: Final = 20.0
"""The longest a harness waits for a store to notice an outage or its end
(PostgreSQL's restart and the cluster layer's reconnect backoff included)."""


@dataclass(frozen=True)
class Traits:
    """Where a backend legitimately differs; the tests assert each field."""

    name: str
    shared: bool
    """Several processes may write the data: ``commit`` orders ops itself
    (and needs a ``Follower``), ``append`` takes delete records only and a
    delete writes no record (the life ends by UPDATE and DELETE statements).
    A local store appends op records too (the service stages runs of them)
    and counts a delete as a record written."""
    recovers_records: bool
    """``open`` and ``reload`` hand back the records after the last snapshot
    (False: nothing at all; every CRDT is read with ``load`` when used)."""
    holds_checks_position: bool
    """``holds`` answers for the epoch and seq asked, against what is durable
    (False: it answers whether nothing is in flight on the CRDT, since the
    engine holds only committed state of it then and the rows are the truth)."""
    finds_failure_itself: bool
    """The store notices it cannot write before a write fails: ``ready``
    turns False first, a commit is refused at once and no failure is counted
    (MemoryStore's switch; PostgreSQL's health check in the cluster layer).
    False: a write has to fail first (a full disk under FileStore), which
    ``stats.failures`` counts and which turns ``ready`` False."""
    counts_io: bool
    """Counts ``bytes_written``, ``fsyncs``, ``recovered_records`` and
    ``recovery_bytes_read`` (a store without files of its own leaves them 0)."""


class Harness:
    """One backend's store with an engine over it (see the module doc)."""

    traits: Traits
    store: Store
    engine: Engine
    recovered: Recovered
    """What the first ``open`` returned (set by the fixture)."""
    quotas: Quotas

    def __init__(self) -> None:
        self.noted: dict[tuple[str, str], int] = {}
        """The size last reported to the store of each CRDT (``note_size``)."""

    # -- what each backend does its own way --------------------------------

    def unopened(self) -> Store:
        """A new store object on this harness's data, not opened."""
        raise NotImplementedError

    async def start(self) -> Recovered:
        """Open a store on the data with a new engine; what ``open`` returned."""
        raise NotImplementedError

    async def restart(self) -> Recovered:
        """Close and :meth:`start` again on the same data (a process restart)."""
        await self.close()
        return await self.start()

    async def close(self) -> None:
        await self.store.close()

    async def finish(self) -> None:
        """End the test: the backend's outage (if any) over, the store closed."""
        await self.close()

    async def break_writes(self) -> None:
        """From now on the backend cannot write."""
        raise NotImplementedError

    async def heal(self) -> None:
        """The backend can write again; returns once the store is ready."""
        raise NotImplementedError

    async def expire_history(self) -> None:
        """Let the store drop what its history retention no longer asks for."""
        raise NotImplementedError

    async def snapshot(self) -> None:
        """Have the store write a snapshot if it takes them on request."""
        raise NotImplementedError

    # -- the same for every backend -------------------------------------------

    def use_engine(self) -> None:
        """A new engine, given to the store as ``App.start`` does: a store
        that loads on demand snapshots no entries, and checkpoints one CRDT."""
        self.engine = Engine()
        engine = self.engine
        self.quotas = Quotas(Limits(), engine)  # the service's sizes (no limit reached here)
        engine.on_measured = self.note_size  # as App wires it
        self.store.set_snapshot_source(
            (lambda: ()) if self.store.loads_on_demand else engine.export_entries,
            engine.export_one,
        )

    async def ensure(self, crdt_id: str, ns: str = NS) -> None:
        """Make the CRDT resident as ``Residency.ensure`` does (a load)."""
        if (ns, crdt_id) in self.engine:
            return
        loaded = await self.store.load(ns, crdt_id)
        if loaded is not None:
            self.engine.load(ns, crdt_id, *loaded)  # measured as loaded (on_measured)

    def note_size(self, ns: str, crdt_id: str, size: int) -> None:
        self.store.note_size(ns, crdt_id, size)
        self.noted[(ns, crdt_id)] = size

    def apply_for(self, plan: Plan, client_id: int = CLIENT) -> Callable[[], ApplyResult]:
        """The ``apply`` the service hands ``Store.commit`` (``_timed_apply``
        without the timing): check, apply, count the growth (each measure of
        a size reaches the store through ``on_measured``)."""
        engine, quotas = self.engine, self.quotas

        def apply() -> ApplyResult:
            growth = quotas.check(plan, None)
            result = engine.apply(plan, client_id)
            quotas.applied(plan, growth)
            return result

        return apply

    async def commit(
        self, crdt_id: str, body: Any, *, ns: str = NS, client_id: int = CLIENT
    ) -> ApplyResult:
        """One request through the store, as ``CrdtService.apply_ops`` sends it."""
        await self.ensure(crdt_id, ns)
        plan = self.engine.plan(ns, crdt_id, body)
        return await self.store.commit(ns, crdt_id, self.apply_for(plan, client_id))

    async def delete(self, crdt_id: str) -> None:
        """End the CRDT's life as ``CrdtService.delete`` does: a delete record appended."""
        await self.ensure(crdt_id)
        record = self.engine.delete(NS, crdt_id)
        assert record is not None, f"{crdt_id} has no life to end"
        await self.store.append([record])
        self.noted.pop((NS, crdt_id), None)

    async def rebuild(self) -> None:
        """After a failed commit, what the service does before it writes again:
        a local store's memory may hold records the disk does not, so the
        engine is rebuilt from ``reload`` (``App.load_state``: for a store
        that loads on demand, emptied); a shared store's follower has dropped
        and re-read what the failed commit touched by itself."""
        if self.traits.shared:
            return
        recovered = await self.store.reload()
        self.engine.clear()
        if not self.store.loads_on_demand:
            for entry in recovered.entries:
                self.engine.import_entry(entry)
            for record in recovered.records:
                self.engine.replay_resident(record)

    def state(self, crdt_id: str) -> dict[str, Any] | None:
        """The engine's full state of the CRDT (None: it holds none)."""
        return self.engine.read(NS, crdt_id, full=True)

    async def stored(self, crdt_id: str) -> dict[str, Any] | None:
        """The full state ``Store.load`` gives back, rebuilt in an engine of its own."""
        loaded = await self.store.load(NS, crdt_id)
        if loaded is None:
            return None
        engine = Engine()
        engine.load(NS, crdt_id, *loaded)
        return engine.read(NS, crdt_id, full=True)

    async def wait_until(self, check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.traits.name}: {what} not reached in {WAIT_S}s")
            await asyncio.sleep(0.01)


class FileHarness(Harness):
    """FileStore in a temporary data directory, fsync per group commit, its log
    files behind a layer that fails on demand (tests/store/support.py)."""

    traits = Traits(
        name="file",
        shared=False,
        recovers_records=True,
        holds_checks_position=True,
        finds_failure_itself=False,
        counts_io=True,
    )

    store_options: ClassVar[dict[str, Any]] = {}
    """More FileStore arguments, for a subclass that needs them."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.faults = Faults()

    def unopened(self) -> FileStore:
        return FileStore(
            self.data_dir,
            fsync="batch",
            opener=faulty_opener(self.faults),
            probe_interval=PROBE_S,
            history_retention=Retention(ops=RETAIN_OPS),
            **self.store_options,
        )

    async def start(self) -> Recovered:
        store = self.file_store = self.unopened()
        self.store = store
        recovered = await store.open()
        self.use_engine()
        return recovered

    async def break_writes(self) -> None:
        self.faults.write_errno = ENOSPC  # a full disk: the next write fails half-written

    async def heal(self) -> None:
        self.faults.clear()
        await self.wait_until(lambda: self.store.ready, "ready again (the store's probe)")

    async def expire_history(self) -> None:
        await self.file_store.compact_history()

    async def snapshot(self) -> None:
        await self.file_store.compact_now()


class MemoryHarness(Harness):
    """MemoryStore. It has no medium to open again: its restart is a new
    engine over the same store's ``reload``, as its docstring says."""

    traits = Traits(
        name="memory",
        shared=False,
        recovers_records=True,
        holds_checks_position=True,
        finds_failure_itself=True,
        counts_io=False,
    )

    def unopened(self) -> MemoryStore:
        return MemoryStore(history_retention=Retention(ops=RETAIN_OPS))

    async def start(self) -> Recovered:
        store = self.memory_store = self.unopened()
        self.store = store
        recovered = await store.open()
        self.use_engine()
        return recovered

    async def restart(self) -> Recovered:
        recovered = await self.memory_store.reload()
        self.use_engine()
        return recovered

    async def break_writes(self) -> None:
        self.memory_store.fail_writes = True

    async def heal(self) -> None:
        self.memory_store.fail_writes = False

    async def expire_history(self) -> None:
        self.memory_store.compact_history(now_ms=time.time_ns() // 1_000_000)

    async def snapshot(self) -> None:
        await self.memory_store.compact_now()


class PostgresHarness(Harness):
    """PostgresStore in a schema of its own on this package's PostgreSQL
    server, followed by the real cluster layer (``Replicator``, started as
    ``App.start`` starts it) with a ``CrdtService`` as its sink. An outage
    is the server stopped; the store finds out through the replicator's
    health check, and is ready again once the replicator reconnects."""

    traits = Traits(
        name="postgres",
        shared=True,
        recovers_records=False,
        holds_checks_position=False,
        finds_failure_itself=True,
        counts_io=False,
    )

    def __init__(self, server: ThrowawayPostgres, url: str) -> None:
        super().__init__()
        self.server = server
        self.url = url
        self.replicator: Replicator | None = None
        self.halted = False

    def unopened(self) -> PostgresStore:
        return PostgresStore(
            self.url,
            pool_size=4,
            snapshot_every=PG_SNAPSHOT_EVERY,
            ops_retained=RETAIN_OPS,
            history_retention=Retention(ops=RETAIN_OPS),
        )

    async def start(self) -> Recovered:
        store = self.pg_store = self.unopened()
        self.store = store
        self.use_engine()
        replicator = self.replicator = Replicator(store, self._sink(), node_id="contract")
        recovered = await store.open()
        replicator.start()
        return recovered

    def _sink(self) -> CrdtService:
        """The service, as ``App`` builds it: the one way other nodes' records
        (and reads after a failed commit) reach the engine."""
        engine, store, hub = self.engine, self.store, Hub()
        return CrdtService(
            engine=engine,
            store=store,
            auth=Authenticator(SigningKey.generate(), None),
            hub=hub,
            metrics=Metrics(),
            webhooks=None,
            reload=lambda _: None,
            residency=Residency(
                engine=engine, store=store, budget_bytes=1 << 30, subscribed=hub.subscribed
            ),
            quotas=self.quotas,
        )

    async def close(self) -> None:
        if self.replicator is not None:
            await self.replicator.close()
        await self.store.close()

    async def finish(self) -> None:
        if self.halted:  # the next test needs the server
            await asyncio.to_thread(self.server.resume)
            self.halted = False
        await self.close()

    async def break_writes(self) -> None:
        self.halted = True
        await asyncio.to_thread(self.server.halt)
        await self.wait_until(lambda: not self.store.ready, "not ready (the health check)")

    async def heal(self) -> None:
        if self.halted:
            await asyncio.to_thread(self.server.resume)
            self.halted = False
        await self.wait_until(lambda: self.store.ready, "ready again (the replicator reconnected)")

    async def expire_history(self) -> None:
        """Nothing to do: each snapshot a commit writes trims the history."""

    async def snapshot(self) -> None:
        """Nothing to do: a commit writes a snapshot when a seq crosses a
        multiple of ``snapshot_every``."""


BACKENDS: Final = ("file", "memory", "postgres")
