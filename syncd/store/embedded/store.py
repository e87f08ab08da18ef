"""FileStore: the default durable store, an append-only log in a data directory.

Layout::

    <data_dir>/LOCK                                  flock'd while a store has it open
    <data_dir>/log/<first lsn, 20 digits>.seg        log segments (log.py)
    <data_dir>/snapshots/snapshot-<lsn>.snap         snapshots (snapshot.py)
    <data_dir>/history/                              history segments and index (history.py)

Theory of operation
-------------------
This module is the facade: :class:`FileStore`, the ``Store`` the service talks
to. It holds the store's phase (``state.py``) and answers for failures; the
work is in one module per concern:

- *Group commit* (``commit.py``): ``append`` queues its records; one flusher
  writes and fsyncs what is queued in batches, then the history files.
  ``append([])`` is a barrier: it resolves once everything appended before it
  is durable.
- *Recovery* (``recovery.py``): ``open`` locks the directory, reads the newest
  snapshot and checks the log after it, cuts a torn tail; ``reload`` reads the
  same way.
- *Compaction* (``compaction.py``): snapshots once the log has grown, the log
  cut behind them, the history's retention.

*Failure.* When a write or fsync fails, the file's content after the last
acknowledged byte is unknown. Every append in flight or queued raises 503,
``ready`` turns False, the segment is cut back to its last good offset and
writing continues in a fresh segment once a probe (a page written and fsynced,
every ``probe_interval`` seconds) succeeds; then ``ready`` is True again. The
caller's memory may hold ops whose records failed: ``on_failure`` (once per
episode, with the error) tells it so whenever an append that carried records
fails, and ``reload()`` re-reads the durable state for it to load in place of
its memory. The store does not gate appends on that reload: the caller refuses
its own writes until it has rebuilt. It does gate snapshots on it, since a
snapshot of such memory would make the failed records durable. Records whose
append raised are never reported by a later open or reload, unless the process
dies before the cut (a failed fsync may still have reached the disk).
``state.py`` holds the store's phase (new, open, reloading, closing, closed)
and the facts beside it (the log's failure, the caller's suspect memory,
whether it was told).

*History.* After each durable write the same frames, and checkpoints of CRDTs
due one, are appended to the history files (``history.FileStoreHistory``, not
fsynced per write: the log is the truth; they are fsynced before the log drops
segments, and what a crash took is appended again from the log at open).
``history`` and ``history_base`` read them back for ``/history`` and ``?at=``;
``SERVICE_HISTORY_RETENTION`` says what compaction keeps. When a history write
fails, the store refuses appends (the history holds the CRDTs that left
memory) and the same prober as for the log, once the disk takes a probe write,
waits for the appends in flight and reads the history back from the log
(``history.reopen``, as a start does); then ``ready`` is True again.

*Replays.* ``ops_since`` reads a CRDT's recent ops back from the history
files (at most ``replay_tail_per_crdt`` of them; further behind, a snapshot
is cheaper): nothing per CRDT is held in memory for it, and it works across
restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from syncd.errors import StoreUnavailable
from syncd.store.base import (
    AppliedT,
    EntrySource,
    Listed,
    Loaded,
    Record,
    Recovered,
    Retained,
    SnapshotSource,
    StoreStats,
    Usage,
)
from syncd.store.embedded.backup import Plan, copy_plan, make_plan, set_aside_manifest
from syncd.store.embedded.commit import MAX_BATCH_BYTES, GroupCommit
from syncd.store.embedded.compaction import SNAPSHOT_EVERY_BYTES, Compaction
from syncd.store.embedded.history import FileStoreHistory
from syncd.store.embedded.history_files import HISTORY_SEGMENT_BYTES
from syncd.store.embedded.iothread import IoThread
from syncd.store.embedded.keydir import CACHED_LIVES, FLUSH_LIVES, KeyDir
from syncd.store.embedded.log import (
    RUNNING,
    SEGMENT_BYTES,
    LogFile,
    LogWriter,
    Opener,
    StoreCorruptError,
    list_segments,
)
from syncd.store.embedded.recovery import (
    StoreLockedError,
    acquire_lock,
    open_disk,
    read_disk,
    release_lock,
)
from syncd.store.embedded.state import CLOSED, CLOSING, NEW, OPEN, RELOADING, Phase, StoreState
from syncd.store.history_index import DEFAULT_RETENTION, Retention
from syncd.store.tail import REPLAY_TAIL_PER_CRDT

__all__ = [
    "FSYNC_MODES",
    "HEALTH_PROBE_INTERVAL_S",
    "MAX_BATCH_BYTES",
    "PROBE_INTERVAL_S",
    "SNAPSHOT_EVERY_BYTES",
    "FileStore",
    "StoreCorruptError",
    "StoreLockedError",
    "StoreStats",
]

log = logging.getLogger("syncd.store")

FSYNC_MODES = ("batch", "always", "never")

PROBE_INTERVAL_S = 1.0
"""How often a failed store tries the disk again."""
HEALTH_PROBE_INTERVAL_S = 5.0
"""How often a store that wrote nothing meanwhile proves that its disk takes
writes (a probe page written and fsynced in the log's directory): without
it, a disk that filled up, turned read-only or failed while the node was
idle showed only at the next op, and /health/ready said 200 until then. A
store that wrote a batch in the interval has its proof already: nothing is
added to the op path."""


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class FileStore:
    """The append-only log store. See the module docstring for the whole story."""

    shared = False

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        fsync: str = "batch",
        segment_bytes: int = SEGMENT_BYTES,
        snapshot_every_bytes: int = SNAPSHOT_EVERY_BYTES,
        max_batch_bytes: int = MAX_BATCH_BYTES,
        replay_tail_per_crdt: int = REPLAY_TAIL_PER_CRDT,
        probe_interval: float = PROBE_INTERVAL_S,
        health_probe_interval: float = HEALTH_PROBE_INTERVAL_S,
        on_written: Callable[[int], None] | None = None,
        on_commit: Callable[[float], None] | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
        opener: Opener = LogFile.open,
        log_runway: bool = True,
        history_retention: Retention | None = None,
        history_segment_bytes: int = HISTORY_SEGMENT_BYTES,
        clock_ms: Callable[[], int] | None = None,
        index_flush_crdts: int = FLUSH_LIVES,
        index_cached_crdts: int = CACHED_LIVES,
    ) -> None:
        if fsync not in FSYNC_MODES:
            raise ValueError(f"unknown fsync mode {fsync!r}; expected one of {FSYNC_MODES}")
        if (
            min(segment_bytes, snapshot_every_bytes, max_batch_bytes) < 1
            or min(probe_interval, health_probe_interval) <= 0
        ):
            raise ValueError("sizes and the probe intervals must be positive")
        self.data_dir = os.fspath(data_dir)
        self.fsync_mode = fsync
        self.on_failure = on_failure
        self.stats = StoreStats()
        self._log_dir = os.path.join(self.data_dir, "log")
        self._snap_dir = os.path.join(self.data_dir, "snapshots")
        self._segment_bytes = segment_bytes
        self._log_runway = log_runway
        self._tail_per_crdt = replay_tail_per_crdt
        self._probe_interval = probe_interval
        self._health_probe_interval = health_probe_interval
        self._opener = opener
        self._history = FileStoreHistory(
            os.path.join(self.data_dir, "history"),
            history_retention or Retention.parse(DEFAULT_RETENTION),
            clock_ms or _wall_ms,
            history_segment_bytes,
            KeyDir(flush_lives=index_flush_crdts, cached_lives=index_cached_crdts),
        )
        self._history.on_fail = self._history_failed

        self._state = StoreState()
        self._lock_fd = -1
        self._io: IoThread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._snap_io: IoThread | None = None
        self._writer: LogWriter | None = None
        self._prober: asyncio.Task[None] | None = None
        self._health_prober: asyncio.Task[None] | None = None
        self._stalled = False
        self._creating: dict[str, dict[str, int]] = {}
        """Per namespace, the CRDTs whose first record is queued or being
        written (how many such appends each): not in the index yet, counted by
        :meth:`usage_now` so that creations sent at once cannot pass
        ``SERVICE_NAMESPACE_MAX_CRDTS`` by all being checked before the first
        of them is written."""

        self._commit = GroupCommit(
            self._state,
            self._history,
            self.stats,
            fsync_mode=fsync,
            max_batch_bytes=max_batch_bytes,
            on_commit=on_commit,
            on_written=on_written,
            failed=self._write_failed,
            doubted=self._notify,
            durable_batch=self._batch_durable,
            history_grown=self._history_grown,
        )
        self._compaction = Compaction(
            self._state,
            self._commit,
            self._history,
            self.stats,
            snap_dir=self._snap_dir,
            opener=opener,
            snapshot_every_bytes=snapshot_every_bytes,
            ready=lambda: self.ready,
        )

    # -- the Store protocol -------------------------------------------------

    def lock(self) -> None:
        """Take the directory's lock now (``open`` takes it otherwise), so a
        caller can hold it before it writes anything there; StoreLockedError
        when another store has it."""
        if self._lock_fd < 0:
            os.makedirs(self.data_dir, exist_ok=True)
            self._lock_fd = acquire_lock(self.data_dir)

    async def open(self) -> Recovered:
        """Lock the directory, recover, repair a torn tail; the state to load."""
        if self._state.phase is not NEW:
            raise RuntimeError("a FileStore is opened once")
        self.lock()
        # Before anything is written: from here on a backup's manifest would
        # describe a directory that is no longer there.
        set_aside_manifest(self.data_dir)
        os.makedirs(self._log_dir, exist_ok=True)
        os.makedirs(self._snap_dir, exist_ok=True)
        io = self._io = IoThread("syncd-log")
        snap_io = self._snap_io = IoThread("syncd-snapshot")
        loop = self._loop = asyncio.get_running_loop()
        try:
            disk, writer, error = await io.run(
                loop,
                open_disk,
                self._log_dir,
                self._snap_dir,
                self._history,
                self._opener,
                self._segment_bytes,
                self._log_runway,
            )
        except BaseException:
            self._release()
            raise
        self._writer = writer
        self._compaction.start(io, snap_io, writer, disk.snapshot.size if disk.snapshot else 0)
        self.stats.recovered_records = len(disk.records)
        self.stats.recovery_bytes_read = disk.bytes_read
        self.stats.fsyncs = writer.fsyncs
        self._state.to(OPEN)
        self._commit.start(loop, io, writer, disk.durable, disk.new_bytes)
        if error is not None:
            log.error("the data directory %s is not writable: %s", self.data_dir, error)
            self._enter_failure(error)
        if self._history.broken:
            self._start_probing()
        self._health_prober = asyncio.create_task(self._health_loop(), name="syncd-disk-health")
        log.info(
            "opened %s: snapshot at log sequence %d with %d entries, %d records after it, "
            "last durable sequence %d",
            self.data_dir,
            disk.snapshot.lsn if disk.snapshot else 0,
            len(disk.snapshot.entries) if disk.snapshot else 0,
            len(disk.records),
            disk.durable,
        )
        return disk.hand_over()

    def set_snapshot_source(self, source: SnapshotSource, entry: EntrySource | None = None) -> None:
        self._compaction.source = source
        self._commit.entry = entry

    @property
    def loads_on_demand(self) -> bool:
        # The history files address each CRDT (a checkpoint and the ops after
        # it): any CRDT can be read back from them (load raises 503 while they
        # take no writes).
        return True

    async def load(self, ns: str, crdt_id: str) -> Loaded | None:
        assert self._snap_io is not None and self._loop is not None
        return await self._history.current(self._loop, self._snap_io, ns, crdt_id)

    def holds(self, ns: str, crdt_id: str, epoch: str, seq: int) -> bool:
        return self._history.holds(ns, crdt_id, epoch, seq)

    async def list_ids(self, ns: str, prefix: str, after: str | None, limit: int) -> list[Listed]:
        return self._history.index.listing(ns, prefix, after, limit)

    def note_size(self, ns: str, crdt_id: str, size: int) -> None:
        self._history.index.note_size(ns, crdt_id, size)

    async def usage(self, ns: str) -> Usage:
        return self.usage_now(ns)

    def usage_now(self, ns: str) -> Usage:
        index = self._history.index
        usage = index.usage(ns)
        creating = self._creating.get(ns)
        if creating:
            # Those written already are in the index's count (their futures
            # settle a loop step later): count each creation once.
            extra = sum(1 for crdt_id in creating if index.type_of(ns, crdt_id) is None)
            usage = Usage(usage.crdts + extra, usage.bytes, usage.unmeasured)
        return usage

    def usages(self) -> dict[str, Usage]:
        return self._history.index.usages()

    def usage_total(self) -> tuple[int, Usage]:
        return self._history.index.usage_total()

    def largest_usages(self, k: int) -> list[tuple[str, Usage]]:
        return self._history.index.largest_usages(k)

    def unmeasured(self, limit: int) -> list[tuple[str, str]]:
        return self._history.index.unmeasured(limit)

    async def history(
        self, ns: str, crdt_id: str, epoch: str, latest: int, before: int | None, limit: int
    ) -> tuple[list[Record], int]:
        assert self._snap_io is not None and self._loop is not None
        return await self._history.page(
            self._loop, self._snap_io, ns, crdt_id, epoch, latest, before, limit
        )

    async def history_window(
        self, ns: str, crdt_id: str, epoch: str, latest: int, since: int | None, most: int
    ) -> tuple[Retained, int]:
        assert self._snap_io is not None and self._loop is not None
        return await self._history.window(
            self._loop, self._snap_io, ns, crdt_id, epoch, latest, since, most
        )

    async def history_base(
        self, ns: str, crdt_id: str, epoch: str, latest: int, seq: int
    ) -> tuple[dict[str, Any] | None, list[Record]]:
        assert self._snap_io is not None and self._loop is not None
        return await self._history.base(self._loop, self._snap_io, ns, crdt_id, epoch, latest, seq)

    async def backup(self, dest: str) -> dict[str, Any]:
        """A consistent copy of this running store in ``dest`` (new or empty):
        the newest snapshot, the log after it and the history, fsynced, with a
        manifest; writes go on meanwhile (see ``backup.py``). The manifest."""
        plan, release = await self.backup_plan()
        try:
            assert self._snap_io is not None
            return await self._snap_io.run(asyncio.get_running_loop(), copy_plan, plan, dest)
        finally:
            release()

    async def backup_plan(self) -> tuple[Plan, Callable[[], None]]:
        """The files of a consistent copy as of now, and the call that ends the
        copy: until then no snapshot (so no log compaction) and no history
        compaction runs, since both would delete what the plan names. Writes
        go on meanwhile."""
        if not self._state.running:
            raise RuntimeError("backup needs an open store")
        assert self._io is not None and self._writer is not None
        loop = asyncio.get_running_loop()
        writer = self._writer
        snapshot_lock, history_lock = self._compaction.lock, self._history.lock
        await snapshot_lock.acquire()
        try:
            await history_lock.acquire()
        except BaseException:
            snapshot_lock.release()
            raise
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                history_lock.release()
                snapshot_lock.release()

        try:
            # No key directory table is written while the copy runs (none
            # starts while the history lock is held): the copy takes the one
            # in place, whole.
            await self._history.wait_index_flush()
            await self._enqueue(())  # everything queued before now is durable
            lsn = self._commit.durable

            def plan() -> Plan:
                active = writer.active_file()
                return make_plan(self.data_dir, lsn, active, self._history.files)

            return await self._io.run(loop, plan), release
        except BaseException:
            release()
            raise

    async def compact_history(self) -> int:
        """Apply the retention to the history now; the history segments deleted."""
        assert self._snap_io is not None
        return await self._compaction.compact_history()

    @property
    def history_bytes(self) -> int:
        return self._history.files.total_bytes

    async def append(self, records: Sequence[Record]) -> None:
        """Persist ``records`` in order; returns once durable, else raises 503."""
        await self._enqueue(records)

    def append_soon(self, records: Sequence[Record]) -> asyncio.Future[None]:
        """Queue ``records`` now; the group commit's future for them."""
        return self._enqueue(records)

    async def commit(self, ns: str, crdt_id: str, apply: Callable[[], AppliedT]) -> AppliedT:
        """Apply now (this process is the only writer), then wait for the group commit.

        What ``apply()`` raises passes through; any failure after it is a
        ``StoreUnavailable`` (memory now holds records the log does not)."""
        result = apply()
        # The records enter the queue in this same loop step: memory and log move together.
        try:
            await self._enqueue(result.records)
        except StoreUnavailable:
            raise
        except Exception:
            log.exception("appending the records of a commit failed")
            raise StoreUnavailable() from None
        return result

    async def ops_since(self, ns: str, crdt_id: str, epoch: str, since: int) -> list[Record] | None:
        # From the history files: nothing per CRDT is kept in memory for it.
        if self._history.broken:
            return None
        assert self._snap_io is not None and self._loop is not None
        return await self._history.since(
            self._loop, self._snap_io, ns, crdt_id, epoch, since, self._tail_per_crdt
        )

    @property
    def ready(self) -> bool:
        state = self._state
        return (
            state.phase is OPEN
            and state.failure is None
            # The history holds the CRDTs that left memory: without it, a write
            # to one of them could not be told from the first op of a new one.
            and not self._history.broken
        )

    @property
    def phase(self) -> Phase:
        """Where the store is in its lifecycle (``state.py``)."""
        return self._state.phase

    @property
    def wal_last_seq(self) -> int:
        return self._commit.durable

    async def close(self) -> None:
        """Flush what is pending, stop background work, release the directory."""
        state = self._state
        if state.phase is NEW or state.phase is CLOSED:
            if state.phase is NEW:
                state.to(CLOSED)
            self._release()  # the lock, when lock() took it and open() never ran
            return
        if state.phase is not CLOSING:  # (a second close() meanwhile runs the steps again)
            state.to(CLOSING)
        async with self._compaction.lock:  # a running snapshot still needs the flusher
            pass
        await self._commit.drain()
        for prober in (self._prober, self._health_prober):
            if prober is not None:
                prober.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await prober
        writer = self._writer
        assert writer is not None and self._io is not None
        loop = asyncio.get_running_loop()
        if self.fsync_mode == "never" and state.failure is None:
            try:
                await self._io.run(loop, writer.sync)
            except OSError as exc:
                log.error("final fsync of the log failed: %s", exc)
        await self._io.run(loop, writer.close)
        await self._compaction.wait_history()
        # The key directory as a table: the next start reads it, not every frame.
        await self._history.close_index(loop)
        await self._io.run(loop, self._history.files.close)
        if state.phase is CLOSING:
            state.to(CLOSED)
        self._release()

    # -- beyond the protocol ------------------------------------------------

    async def reload(self) -> Recovered:
        """Re-read the durable state (snapshot and log) without re-locking: what the
        caller loads in place of its memory after ``on_failure``. Call it when no
        appends are in flight."""
        state = self._state
        if not state.running:
            raise RuntimeError("reload() needs an open store")
        assert self._io is not None and self._writer is not None
        writer = self._writer
        state.to(RELOADING)  # one reload at a time
        state.told = state.suspect = False
        try:
            disk = await self._io.run(
                asyncio.get_running_loop(),
                lambda: read_disk(
                    self._log_dir,
                    self._snap_dir,
                    limits=writer.limits(),
                    tolerate_tail=False,
                    doing=RUNNING,
                ),
            )
        finally:
            if state.phase is RELOADING:  # (not when close() started meanwhile)
                state.to(OPEN)
        if disk.durable != self._commit.durable:
            log.error(
                "reload read up to sequence %d, expected %d", disk.durable, self._commit.durable
            )
        return disk.hand_over()

    async def compact_now(self) -> int:
        """Take a snapshot now and compact the log behind it; the LSN it covers."""
        if self._compaction.source is None:
            raise RuntimeError("compact_now() needs a snapshot source")
        if not self._state.running:
            raise RuntimeError("compact_now() needs an open store")
        return await self._compaction.snapshot()

    async def probe(self) -> bool:
        """Try once to repair a failed log; True when the disk takes writes again."""
        state = self._state
        if state.failure is None:
            return True
        assert self._io is not None and self._writer is not None
        try:
            await self._io.run(
                asyncio.get_running_loop(), self._writer.repair, self._commit.durable + 1
            )
        except OSError as exc:
            state.failure = exc  # the refusals name the latest error
            log.debug("storage probe failed: %s", exc)
            return False
        if state.failure is not None:
            state.failure = None
            state.told = False  # a new episode is told again
            log.warning("the data directory %s takes writes again", self.data_dir)
        return True

    @property
    def log_segments(self) -> list[str]:
        """Paths of the current segments, oldest first (for tests and tools)."""
        return [path for _, path in list_segments(self._log_dir)]

    # -- appending ------------------------------------------------------------

    def _enqueue(self, records: Sequence[Record]) -> asyncio.Future[None]:
        if not self.ready:
            phase = self._state.phase
            if phase is NEW:
                raise RuntimeError("open() the store first")
            if phase >= CLOSING:
                raise StoreUnavailable("storage is shutting down")
            error = self._refusal()
            if records:
                self._notify(error)
            raise error
        future = self._commit.enqueue(records)
        for record in records:
            if record.get("seq") == 1:  # a life's first op: the only kind that may create
                self._note_creation(record["ns"], record["id"], future)
        return future

    def _note_creation(self, ns: str, crdt_id: str, future: asyncio.Future[None]) -> None:
        """Count ``crdt_id`` in ``ns`` as created until ``future`` (its write) settles,
        unless the index holds it already (a new life of a live key: no creation)."""
        if self._history.index.type_of(ns, crdt_id) is not None:
            return
        creating = self._creating.setdefault(ns, {})
        creating[crdt_id] = creating.get(crdt_id, 0) + 1

        def settled(_: asyncio.Future[None]) -> None:
            left = creating[crdt_id] - 1
            if left:
                creating[crdt_id] = left
                return
            del creating[crdt_id]
            if not creating and self._creating.get(ns) is creating:
                del self._creating[ns]

        future.add_done_callback(settled)

    def _refusal(self) -> StoreUnavailable:
        """Why appends are refused now (the store is open but not ready)."""
        state = self._state
        failure = state.failure
        if failure is None and state.phase is RELOADING:
            return StoreUnavailable("storage is re-reading its state after a write failure")
        if failure is None:
            failure = self._history.error
        if failure is None:
            return StoreUnavailable("storage is recovering from a write failure")
        reason = getattr(failure, "strerror", None) or str(failure)
        return StoreUnavailable(f"storage is recovering from a write failure: {reason}")

    # -- what the group commit reports -----------------------------------------

    def _write_failed(self, exc: BaseException) -> None:
        """The group commit's batch failed (its appends answered 503)."""
        log.error(
            "writing the log in %s failed (%s); refusing writes until the disk takes them",
            self.data_dir,
            exc,
        )
        self._enter_failure(exc)

    def _batch_durable(self) -> None:
        self._compaction.maybe_snapshot()

    def _history_grown(self) -> None:
        self._compaction.start_history_compaction()

    # -- failure ----------------------------------------------------------------

    def _enter_failure(self, exc: BaseException) -> None:
        self._state.failure = exc
        self._start_probing()

    def _history_failed(self) -> None:
        """A history write failed (called from any thread): probe until it is
        read back from the log."""
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to recover
                loop.call_soon_threadsafe(self._start_probing)

    def _start_probing(self) -> None:
        if not self._state.running:
            return  # not open yet (open() calls it then), or closing
        if self._prober is None or self._prober.done():
            self._prober = asyncio.create_task(self._probe_loop(), name="syncd-log-probe")

    def _notify(self, exc: BaseException) -> None:
        state = self._state
        state.suspect = True  # no snapshot of this memory until reload()
        if self.on_failure is None or state.told:
            return
        state.told = True
        try:
            self.on_failure(exc)
        except Exception:
            log.exception("on_failure callback failed")

    async def _probe_loop(self) -> None:
        """Every ``probe_interval``: repair the log once a probe succeeds, then
        read a broken history back from the log (:meth:`_reopen_history`)."""
        state = self._state
        history = self._history
        while (state.failure is not None or history.broken) and not state.closing:
            await asyncio.sleep(self._probe_interval)
            if state.closing:
                return
            try:
                if await self.probe() and history.broken:
                    await self._reopen_history()
            except Exception:
                log.exception("storage probe crashed")

    async def _health_loop(self) -> None:
        """Every ``health_probe_interval`` in which no record was written: a
        probe write (:meth:`LogWriter.probe`, in the log's I/O thread, in turn
        with the batches). One that fails is a failure of the store, as a
        failed batch is: writes are refused and ``ready`` is False until the
        failure's prober finds the disk taking writes again."""
        state = self._state
        stats = self.stats
        written = stats.records_written
        while not state.closing:
            await asyncio.sleep(self._health_probe_interval)
            if stats.records_written != written:
                written = stats.records_written
                continue  # a batch reached the disk meanwhile: proof enough
            if not self.ready:
                continue  # recovering, or failed already: its own prober tries the disk
            assert self._io is not None and self._writer is not None
            try:
                await self._answered(self._io.run(asyncio.get_running_loop(), self._writer.probe))
            except OSError as exc:
                if not self.ready or state.closing:
                    continue  # a batch failed meanwhile, and says so itself
                log.error(
                    "the data directory %s takes no writes (%s): /health/ready answers 503"
                    " and writes are refused until it does",
                    self.data_dir,
                    exc,
                )
                self._enter_failure(exc)
            except Exception:
                log.exception("storage health probe crashed")

    @property
    def stalled(self) -> bool:
        """The disk has not answered a probe write for ``health_probe_interval``
        (a hung fsync): /health/ready says 503 meanwhile. Writes are not
        refused for it: a disk that is only slow answers them late."""
        return self._stalled

    async def _answered(self, probe: asyncio.Future[None]) -> None:
        """Wait for ``probe`` (queued behind any batch in flight); past
        ``health_probe_interval`` the store is :attr:`stalled` until it returns."""
        # Its outcome is read even when the wait is cancelled (close()).
        probe.add_done_callback(lambda done: done.cancelled() or done.exception())
        finished, _ = await asyncio.wait((probe,), timeout=self._health_probe_interval)
        if not finished:
            self._stalled = True
            log.error(
                "the data directory %s has not answered a write for %g s:"
                " /health/ready answers 503 until it does",
                self.data_dir,
                self._health_probe_interval,
            )
            try:
                await asyncio.wait((probe,))
            finally:
                self._stalled = False
            log.warning("the data directory %s answers writes again", self.data_dir)
        probe.result()

    async def _reopen_history(self) -> bool:
        """Read the broken history back from the log (``history.reopen``), once
        every record in flight is durable: the store refuses appends while the
        history is broken, so none is written meanwhile. Whether it is back."""
        state = self._state
        if not state.running:
            return False
        assert self._io is not None and self._writer is not None
        loop = asyncio.get_running_loop()
        try:
            await self._commit.enqueue(())  # the appends taken before the failure
        except StoreUnavailable:
            return False  # the log failed under them: its probe comes first
        if state.failure is not None or not state.running:
            return False  # the log failed meanwhile: the probe comes first
        writer, durable = self._writer, self._commit.durable

        def source() -> tuple[
            list[dict[str, Any]], Callable[[int], Iterable[tuple[int, Record]]], int
        ]:
            disk = read_disk(
                self._log_dir,
                self._snap_dir,
                limits=writer.limits(),
                tolerate_tail=False,
                doing=RUNNING,
            )
            if disk.durable != durable:
                raise StoreCorruptError(
                    f"the log reads up to sequence {disk.durable}, expected {durable}"
                )
            entries = disk.snapshot.entries if disk.snapshot is not None else []
            return entries, disk.records.after, disk.durable

        return await self._history.reopen(loop, self._io, source)

    # -- closing ----------------------------------------------------------------

    def _release(self) -> None:
        if self._lock_fd >= 0:
            fd, self._lock_fd = self._lock_fd, -1
            release_lock(fd)
        for pool in (self._io, self._snap_io):
            if pool is not None:
                pool.shutdown()
        self._io = self._snap_io = None
