"""FileStore: the default durable store, an append-only log in a data directory.

Layout::

    <data_dir>/LOCK                                  flock'd while a store has it open
    <data_dir>/log/<first lsn, 20 digits>.seg        log segments (log.py)
    <data_dir>/snapshots/snapshot-<lsn>.snap         snapshots (snapshot.py)

Theory of operation
-------------------
*Group commit.* ``append`` encodes and frames its records on the loop, gives them
the next log sequence numbers (LSNs) and queues them. One flusher task takes
everything queued (up to ``max_batch_bytes``), writes it with one ``pwrite`` and
one ``fsync`` in the store's I/O thread while the next batch fills, then
resolves the appends of that batch in the order they were made. ``fsync="always"``
writes and fsyncs every append call on its own; ``"never"`` writes without
fsync (tests and benchmarks). ``append([])`` is a barrier: it resolves once
everything appended before it is durable.

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
snapshot of such memory would make the failed records durable. Records whose append raised are never
reported by a later open or reload, unless the process dies before the cut (a
failed fsync may still have reached the disk). ``state.py`` holds the store's
phase (new, open, reloading, closing, closed) and the facts beside it (the log's
failure, the caller's suspect memory, whether it was told).

*Snapshots.* When the log has grown by ``max(snapshot_every_bytes, size of the
last snapshot)`` since the last snapshot (the second term keeps the write
amplification of large states bounded), the store calls the snapshot source on
the loop. The caller must apply an op to its memory and ``append`` its record in
the same loop step, so that at that moment the source's entries cover exactly
the records appended so far; and it must not mutate the exported maps later, as
they are encoded in a worker thread. The snapshot is published (renamed into
place) only after those records are durable; then the segments it covers and
older snapshots are deleted. Start-up reads the newest snapshot and only the
log after it, so restart time follows state size plus ``snapshot_every_bytes``,
not history.

*History.* After each durable write the same frames, and checkpoints of CRDTs
due one, are appended to the history files (``filestore_history.FileStoreHistory``,
not fsynced per write: the log is the truth; they are fsynced before the log
drops segments, and what a crash took is appended again from the log at open).
``history`` and ``history_base`` read them back for ``/history`` and ``?at=``;
``SERVICE_HISTORY_RETENTION`` says what compaction keeps.

*Replays.* ``ops_since`` reads a CRDT's recent ops back from the history
files (at most ``replay_tail_per_crdt`` of them; further behind, a snapshot
is cheaper): nothing per CRDT is held in memory for it, and it works across
restarts.

*Recovery.* ``open`` takes an exclusive non-blocking ``flock`` on ``LOCK``,
loads the newest valid snapshot, checks every frame of the log after it, cuts a
torn tail of the last segment (with a warning naming the bytes cut) and refuses
to start (``StoreCorruptError`` naming file and offset) on damage that a crash
cannot explain. The records after the snapshot stay encoded (``records.LogRecords``)
until the caller replays them, a chunk at a time, so a long log is never decoded
all at once; only those the replay tail keeps are decoded during ``open``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from syncd.errors import ApiError, StoreUnavailable
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
from syncd.store.embedded.backup import Plan, copy_plan, make_plan
from syncd.store.embedded.history import FileStoreHistory, Written
from syncd.store.embedded.history_files import HISTORY_SEGMENT_BYTES
from syncd.store.embedded.iothread import IoThread
from syncd.store.embedded.keydir import CACHED_LIVES, FLUSH_LIVES, KeyDir
from syncd.store.embedded.log import (
    FLAG_BATCH_START,
    HEADER_SIZE,
    MAX_RECORD_BYTES,
    PROBE_NAME,
    SEGMENT_BYTES,
    LogFile,
    LogWriter,
    Opener,
    RecordChunk,
    StoreCorruptError,
    check_segment,
    frame,
    list_segments,
)
from syncd.store.embedded.records import LogRecords
from syncd.store.embedded.snapshot import (
    Snapshot,
    SnapshotWriter,
    delete_older,
    list_snapshots,
    read_snapshot,
    remove_temporaries,
)
from syncd.store.embedded.state import CLOSED, CLOSING, NEW, OPEN, RELOADING, Phase, StoreState
from syncd.store.history_index import DEFAULT_RETENTION, Retention
from syncd.store.tail import REPLAY_TAIL_PER_CRDT

__all__ = [
    "FSYNC_MODES",
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

SNAPSHOT_EVERY_BYTES = 16 * 1024 * 1024
"""Log growth that triggers a snapshot: bounds the log replayed at start-up to
about 110k small op records (a second or two)."""

MAX_BATCH_BYTES = 4 * 1024 * 1024
"""One write+fsync carries at most about this much (whole appends), so one slow
batch does not hold back the acknowledgement of everything queued behind it."""

PROBE_INTERVAL_S = 1.0
"""How often a failed store tries the disk again."""


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class StoreLockedError(Exception):
    """Another store (in this or another process) has the data directory open."""


@dataclass
class _Group:
    """The records of one ``append`` call."""

    future: asyncio.Future[None]
    records: list[Record]
    frames: list[bytes]
    first_lsn: int
    size: int
    checkpoints: list[Written] = field(default_factory=list)
    """History checkpoints to write after these records."""


@dataclass
class _Disk:
    """The durable state as read from disk."""

    snapshot: Snapshot | None
    records: LogRecords
    durable: int
    segments: list[tuple[int, str]]
    last: tuple[str, int] | None
    new_bytes: int
    bytes_read: int

    def hand_over(self) -> Recovered:
        """What the caller loads. The disk lets go of it, since the finished
        future that returned the disk may keep it alive for a while, and with it
        a long log's encoded records."""
        recovered = Recovered(
            entries=self.snapshot.entries if self.snapshot else [], records=self.records
        )
        self.records = LogRecords([])
        if self.snapshot is not None:
            self.snapshot.entries = []
        return recovered


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Recovery decodes the replay tail's maps and frees none: the cyclic collector
    would scan them again and again for nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read_disk(
    log_dir: str,
    snap_dir: str,
    *,
    limits: dict[str, int],
    tolerate_tail: bool,
) -> _Disk:
    """Read the newest valid snapshot and check every log record after it; the
    records stay encoded (``LogRecords``) but for those the replay tail holds."""
    with _gc_paused():
        return _read_disk_unpaused(
            log_dir,
            snap_dir,
            limits=limits,
            tolerate_tail=tolerate_tail,
        )


def _read_disk_unpaused(
    log_dir: str,
    snap_dir: str,
    *,
    limits: dict[str, int],
    tolerate_tail: bool,
) -> _Disk:
    snapshot: Snapshot | None = None
    damaged: list[tuple[int, StoreCorruptError]] = []
    for lsn, path in list_snapshots(snap_dir):
        try:
            snapshot = read_snapshot(path, lsn)
            break
        except StoreCorruptError as exc:
            damaged.append((lsn, exc))
    base = snapshot.lsn if snapshot else 0
    bytes_read = snapshot.size if snapshot else 0

    segments = list_segments(log_dir)
    start = 0
    while start + 1 < len(segments) and segments[start + 1][0] <= base + 1:
        start += 1
    needed = segments[start:]
    if needed and needed[0][0] > base + 1:
        if damaged:
            raise damaged[0][1]
        raise StoreCorruptError(
            f"{needed[0][1]}: the log starts at sequence {needed[0][0]}, but no snapshot "
            f"covers the records before it"
        )

    chunks: list[RecordChunk] = []
    expected = needed[0][0] if needed else base + 1
    last: tuple[str, int] | None = None
    new_bytes = 0
    for i, (first, path) in enumerate(needed):
        if first != expected:
            raise StoreCorruptError(
                f"{path}: the segment starts at log sequence {first} where {expected} was "
                f"due (a segment is missing or out of place)"
            )
        scan = check_segment(
            path,
            expected,
            base,
            chunks,
            limit=limits.get(path),
            tolerate_tail=tolerate_tail and i == len(needed) - 1,
        )
        expected = scan.next_lsn
        last = (path, scan.good_end)
        new_bytes += scan.new_bytes
        bytes_read += scan.size
    # In fsync=never mode a crash may lose records a snapshot already covers.
    durable = max(expected - 1, base)
    if damaged:
        newest = damaged[0][0]
        if durable < newest:
            raise damaged[0][1]
        log.warning(
            "snapshot %d is damaged (%s); rebuilt from %s and the log instead",
            newest,
            damaged[0][1],
            f"snapshot {base}" if snapshot else "the whole log",
        )

    records = LogRecords(chunks)
    if snapshot is not None:
        snapshot.tail = []  # (older snapshots carry a replay tail: replays now read the history)
    return _Disk(snapshot, records, durable, segments, last, new_bytes, bytes_read)


@dataclass
class Scan:
    """What a read-only scan of a data directory found (``syncd verify``)."""

    snapshot_lsn: int
    segments: int
    records: int
    durable: int


def read_only_scan(data_dir: str) -> Scan:
    """Recovery's checks (every snapshot frame, every log record's CRC,
    sequence and encoding) without taking the lock or changing a byte;
    StoreCorruptError on damage, a torn tail included."""
    disk = _read_disk(
        os.path.join(data_dir, "log"),
        os.path.join(data_dir, "snapshots"),
        limits={},
        tolerate_tail=False,
    )
    count = 0
    for _ in disk.records:  # decodes every body: a record that is not a map fails here
        count += 1
    base = disk.snapshot.lsn if disk.snapshot else 0
    return Scan(base, len(disk.segments), count, disk.durable)


def _acquire_lock(data_dir: str) -> int:
    path = os.path.join(data_dir, "LOCK")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = ""
        with contextlib.suppress(OSError, ValueError):
            holder = f" (process {int(os.pread(fd, 32, 0).decode().strip())})"
        os.close(fd)
        raise StoreLockedError(
            f"the data directory {data_dir} is in use by another syncd store{holder}; "
            f"stop it or choose another SERVICE_DATA_DIR"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    with contextlib.suppress(OSError):  # the pid is a courtesy for the message above
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


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
        if min(segment_bytes, snapshot_every_bytes, max_batch_bytes) < 1 or probe_interval <= 0:
            raise ValueError("sizes and the probe interval must be positive")
        self.data_dir = os.fspath(data_dir)
        self.fsync_mode = fsync
        self.on_written = on_written
        self.on_commit = on_commit
        """Called with the seconds each durable batch took to write (and sync)."""
        self.on_failure = on_failure
        self.stats = StoreStats()
        self._log_dir = os.path.join(self.data_dir, "log")
        self._snap_dir = os.path.join(self.data_dir, "snapshots")
        self._segment_bytes = segment_bytes
        self._log_runway = log_runway
        self._snapshot_every = snapshot_every_bytes
        self._max_batch = max_batch_bytes
        self._tail_per_crdt = replay_tail_per_crdt
        self._probe_interval = probe_interval
        self._opener = opener
        self._packer = msgpack.Packer(use_bin_type=True)
        self._source: SnapshotSource | None = None
        self._entry: EntrySource | None = None
        self._history = FileStoreHistory(
            os.path.join(self.data_dir, "history"),
            history_retention or Retention.parse(DEFAULT_RETENTION),
            clock_ms or _wall_ms,
            history_segment_bytes,
            KeyDir(flush_lives=index_flush_crdts, cached_lives=index_cached_crdts),
        )
        self._history_tasks: set[asyncio.Task[Any]] = set()

        self._state = StoreState()
        self._lock_fd = -1
        self._io: IoThread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._snap_io: IoThread | None = None
        self._writer: LogWriter | None = None

        self._next_lsn = 1
        self._durable = 0
        self._pending: deque[_Group] = deque()
        self._pending_bytes = 0
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None

        self._prober: asyncio.Task[None] | None = None

        self._snapshot_lock = asyncio.Lock()
        self._snapshot_tasks: set[asyncio.Task[Any]] = set()
        self._log_bytes = 0
        self._bytes_at_snapshot = 0
        self._last_snapshot_size = 0

    # -- the Store protocol -------------------------------------------------

    def lock(self) -> None:
        """Take the directory's lock now (``open`` takes it otherwise), so a
        caller can hold it before it writes anything there; StoreLockedError
        when another store has it."""
        if self._lock_fd < 0:
            os.makedirs(self.data_dir, exist_ok=True)
            self._lock_fd = _acquire_lock(self.data_dir)

    async def open(self) -> Recovered:
        """Lock the directory, recover, repair a torn tail; the state to load."""
        if self._state.phase is not NEW:
            raise RuntimeError("a FileStore is opened once")
        self.lock()
        os.makedirs(self._log_dir, exist_ok=True)
        os.makedirs(self._snap_dir, exist_ok=True)
        self._io = IoThread("syncd-log")
        self._snap_io = IoThread("syncd-snapshot")
        loop = self._loop = asyncio.get_running_loop()
        try:
            disk, writer, error = await self._io.run(loop, self._open_sync)
        except BaseException:
            self._release()
            raise
        self._writer = writer
        self._durable = disk.durable
        self._next_lsn = disk.durable + 1
        self._log_bytes = disk.new_bytes
        self._last_snapshot_size = disk.snapshot.size if disk.snapshot else 0
        self.stats.recovered_records = len(disk.records)
        self.stats.recovery_bytes_read = disk.bytes_read
        self.stats.fsyncs = writer.fsyncs
        self._state.to(OPEN)
        self._flusher = asyncio.create_task(self._flush_loop(), name="syncd-log-flusher")
        if error is not None:
            log.error("the data directory %s is not writable: %s", self.data_dir, error)
            self._enter_failure(error)
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
        self._source = source
        self._entry = entry

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
        return self._history.index.usage(ns)

    def usage_now(self, ns: str) -> Usage:
        return self._history.index.usage(ns)

    def usages(self) -> dict[str, Usage]:
        return self._history.index.usages()

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
        snapshot_lock, history_lock = self._snapshot_lock, self._history.lock
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
            await self._enqueue(())  # everything queued before now is durable
            lsn = self._durable

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
        return await self._history.compact(asyncio.get_running_loop(), self._snap_io)

    @property
    def history_bytes(self) -> int:
        return self._history.files.total_bytes

    async def append(self, records: Sequence[Record]) -> None:
        """Persist ``records`` in order; returns once durable, else raises 503."""
        await self._enqueue(records)

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
        return self._durable

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
        async with self._snapshot_lock:  # a running snapshot still needs the flusher
            pass
        self._wake.set()
        if self._flusher is not None:
            await self._flusher
        if self._prober is not None:
            self._prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prober
        writer = self._writer
        assert writer is not None and self._io is not None
        loop = asyncio.get_running_loop()
        if self.fsync_mode == "never" and state.failure is None:
            try:
                await self._io.run(loop, writer.sync)
            except OSError as exc:
                log.error("final fsync of the log failed: %s", exc)
        await self._io.run(loop, writer.close)
        for task in list(self._history_tasks):
            with contextlib.suppress(Exception):
                await task
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
                lambda: _read_disk(
                    self._log_dir,
                    self._snap_dir,
                    limits=writer.limits(),
                    tolerate_tail=False,
                ),
            )
        finally:
            if state.phase is RELOADING:  # (not when close() started meanwhile)
                state.to(OPEN)
        if disk.durable != self._durable:
            log.error("reload read up to sequence %d, expected %d", disk.durable, self._durable)
        return disk.hand_over()

    async def compact_now(self) -> int:
        """Take a snapshot now and compact the log behind it; the LSN it covers."""
        if self._source is None:
            raise RuntimeError("compact_now() needs a snapshot source")
        if not self._state.running:
            raise RuntimeError("compact_now() needs an open store")
        return await self._snapshot()

    async def probe(self) -> bool:
        """Try once to repair a failed log; True when the disk takes writes again."""
        state = self._state
        if state.failure is None:
            return True
        assert self._io is not None and self._writer is not None
        try:
            await self._io.run(asyncio.get_running_loop(), self._writer.repair, self._durable + 1)
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
        lsn = self._next_lsn
        frames: list[bytes] = []
        size = 0
        pack = self._packer.pack
        try:
            for record in records:
                if not isinstance(record, dict):
                    raise TypeError(f"a log record is a dict, not {type(record).__name__}")
                body = pack(record)
                if len(body) > MAX_RECORD_BYTES:
                    # Not durable, like a failed write: the caller may have applied it.
                    raise StoreUnavailable(
                        f"a log record of {len(body)} bytes is over the "
                        f"{MAX_RECORD_BYTES}-byte limit",
                        status=413,
                        code="payload_too_large",
                    )
                framed = frame(lsn, body)
                frames.append(framed)
                size += len(framed)
                lsn += 1
        except BaseException as exc:
            self._notify(exc)  # the caller may already have applied these records
            raise
        assert self._loop is not None  # set by open()
        # Not asyncio.get_running_loop(): on Python 3.11 each call is a getpid()
        # system call, and this runs once per op.
        future: asyncio.Future[None] = self._loop.create_future()
        group = _Group(future, list(records), frames, self._next_lsn, size)
        if self._entry is not None and records:
            # Now, in the loop step that applied them: the entry is the state
            # right after each CRDT's last record here.
            group.checkpoints = self._history.checkpoints_for(records, self._next_lsn, self._entry)
        self._pending.append(group)
        self._pending_bytes += size
        self._next_lsn = lsn
        self._wake.set()
        return future

    def _refusal(self) -> StoreUnavailable:
        failure = self._state.failure
        if failure is not None:
            reason = getattr(failure, "strerror", None) or str(failure)
            return StoreUnavailable(f"storage is unavailable: {reason}")
        return StoreUnavailable("storage is re-reading its state")

    def _take_batch(self) -> list[_Group]:
        batch: list[_Group] = []
        size = 0
        carries = False
        while self._pending:
            group = self._pending[0]
            if (
                group.records
                and carries
                and (self.fsync_mode == "always" or size + group.size > self._max_batch)
            ):
                break
            batch.append(self._pending.popleft())
            size += group.size
            carries = carries or bool(group.records)
        self._pending_bytes -= size
        return batch

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        writer = self._writer
        io = self._io
        assert writer is not None and io is not None
        sync = self.fsync_mode != "never"
        while True:
            if not self._pending:
                if self._state.closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = self._take_batch()
            parts: list[bytes] = []
            written: list[Written] = []
            checkpoints: list[bytes] = []
            first_lsn = 0
            count = 0
            for group in batch:
                if not group.records:
                    continue
                lsn = group.first_lsn
                for i, record in enumerate(group.records):
                    written.append((group.frames[i], record, lsn + i))
                for cp in group.checkpoints:
                    checkpoints.append(cp[0])
                if not parts:
                    # Mark the batch's first record: see log.py on torn batches.
                    first_lsn = group.first_lsn
                    body = group.frames[0][HEADER_SIZE:]
                    parts.append(frame(first_lsn, body, FLAG_BATCH_START))
                    parts.extend(group.frames[1:])
                else:
                    parts.extend(group.frames)
                count += len(group.records)
            if count:
                data = b"".join(parts)
                for group in batch:
                    written += group.checkpoints
                history_data = data + b"".join(checkpoints) if checkpoints else data
                started = time.perf_counter()
                try:
                    if sync:
                        at = await io.run(
                            loop, self._write, data, first_lsn, sync, history_data, len(written)
                        )
                    else:
                        # No fsync: a page-cache write is cheaper inline than a
                        # hop to the I/O thread and back.
                        at = self._write(data, first_lsn, sync, history_data, len(written))
                except Exception as exc:
                    if not isinstance(exc, OSError):
                        log.exception("unexpected error while writing the log")
                    self.stats.fsyncs = writer.fsyncs
                    self._fail(exc, batch)
                    continue
                if self.on_commit is not None:
                    self.on_commit(time.perf_counter() - started)
                self._durable = first_lsn + count - 1
                self._log_bytes += len(data)
                self.stats.fsyncs = writer.fsyncs
                self.stats.batches += 1
                self.stats.records_written += count
                self.stats.bytes_written += len(data)
                if at is not None:
                    self._history.indexed(at, written)
                    self._history.start_index_flush(loop)
                    if self._history.should_compact:
                        self._start_history_compaction()
            for group in batch:
                if not group.future.done():
                    group.future.set_result(None)
            if count:
                if self.on_written is not None:
                    try:
                        self.on_written(count)
                    except Exception:
                        log.exception("on_written callback failed")
                self._maybe_snapshot()

    def _write(
        self, data: bytes, first_lsn: int, sync: bool, history_data: bytes, frames: int
    ) -> int | None:
        """The log's write, then the history's (in the log's I/O thread, or
        inline without fsync); where the history's went, None if it did not."""
        assert self._writer is not None
        self._writer.write(data, first_lsn, sync)
        return self._history.write(history_data, frames)

    def _start_history_compaction(self) -> None:
        if self._history_tasks or self._state.closing or self._snap_io is None:
            return
        task = asyncio.create_task(self._compact_history(), name="syncd-history-compaction")
        self._history_tasks.add(task)
        task.add_done_callback(self._history_tasks.discard)

    async def _compact_history(self) -> None:
        try:
            await self.compact_history()
        except Exception:
            log.exception("compacting the history failed; the next growth tries again")

    def _fail(self, exc: BaseException, batch: list[_Group]) -> None:
        """Fail the batch and everything queued behind it (their LSNs followed it)."""
        groups = [*batch, *self._pending]
        for group in groups:
            for _, meta, _ in group.checkpoints:
                self._history.index.checkpoint_dropped(meta["ns"], meta["id"])
        self._pending.clear()
        self._pending_bytes = 0
        self._next_lsn = self._durable + 1
        self.stats.failures += 1
        log.error(
            "writing the log in %s failed (%s); refusing writes until the disk takes them",
            self.data_dir,
            exc,
        )
        self._enter_failure(exc)
        reason = getattr(exc, "strerror", None) or str(exc)
        for group in groups:
            if not group.future.done():
                group.future.set_exception(StoreUnavailable(f"storage write failed: {reason}"))
        if any(group.records for group in groups):
            self._notify(exc)

    def _enter_failure(self, exc: BaseException) -> None:
        self._state.failure = exc
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
        state = self._state
        while state.failure is not None and not state.closing:
            await asyncio.sleep(self._probe_interval)
            if state.closing:
                return
            try:
                await self.probe()
            except Exception:
                log.exception("storage probe crashed")

    # -- snapshots ------------------------------------------------------------

    def _maybe_snapshot(self) -> None:
        threshold = max(self._snapshot_every, self._last_snapshot_size)
        if (
            self._source is None
            or self._state.closing
            or self._state.suspect
            # The history holds the CRDTs the engine let go: while it takes no
            # writes, the log behind a snapshot is the only other copy of them.
            or self._history.broken
            or self._snapshot_lock.locked()
            or self._log_bytes - self._bytes_at_snapshot < threshold
        ):
            return
        task = asyncio.create_task(self._auto_snapshot(), name="syncd-snapshot")
        self._snapshot_tasks.add(task)
        task.add_done_callback(self._snapshot_tasks.discard)

    async def _auto_snapshot(self) -> None:
        try:
            await self._snapshot()
        except ApiError:
            pass  # the log failed under it; the next growth tries again
        except Exception:
            log.exception("taking a snapshot failed; the next log growth tries again")
            self._bytes_at_snapshot = self._log_bytes

    async def _snapshot(self) -> int:
        loop = asyncio.get_running_loop()
        assert self._io is not None and self._snap_io is not None and self._writer is not None
        async with self._snapshot_lock:
            source = self._source
            if source is None or not self.ready:
                raise StoreUnavailable("storage is not ready for a snapshot")
            if self._state.suspect:
                raise StoreUnavailable("no snapshot until reload(): memory may hold failed records")
            # The caller applies and appends in one loop step, so right now the
            # source's entries cover exactly the records appended so far.
            entries = list(source())
            covered = self._next_lsn - 1
            mark = self._log_bytes + self._pending_bytes
            barrier = self._enqueue(())
            writer = SnapshotWriter(self._snap_dir, covered, self._opener)
            try:
                await self._snap_io.run(loop, writer.write_entries, entries)
                del entries
                await barrier  # publish only what is durable
                tail: list[Record] = []  # replays come from the history files
                size = await self._snap_io.run(loop, writer.finish, tail)
            except BaseException:
                await self._snap_io.run(loop, writer.abort)
                raise
            self._bytes_at_snapshot = mark
            self._last_snapshot_size = size
            self.stats.snapshots += 1
            try:
                deleted = await self._io.run(loop, self._compact_sync, covered)
            except OSError as exc:
                log.warning("compacting the log behind snapshot %d failed: %s", covered, exc)
                deleted = 0
            self._start_history_compaction()
            log.info(
                "snapshot at log sequence %d (%d bytes) published; %d segments deleted",
                covered,
                size,
                deleted,
            )
            return covered

    def _compact_sync(self, covered: int) -> int:
        assert self._writer is not None
        if self._history.broken:
            return 0  # the log is the only whole copy: it stays
        # The history must hold for good what the log is about to forget.
        try:
            self._history.files.sync()
        except OSError as exc:
            self._history.fail(exc)
            return 0
        deleted = self._writer.delete_covered(covered)
        delete_older(self._snap_dir, covered)
        return deleted

    # -- opening and closing ----------------------------------------------------

    def _open_sync(self) -> tuple[_Disk, LogWriter, OSError | None]:
        remove_temporaries(self._snap_dir)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self._log_dir, PROBE_NAME))
        disk = _read_disk(
            self._log_dir,
            self._snap_dir,
            limits={},
            tolerate_tail=True,
        )
        try:
            self._history.load(disk.snapshot.entries if disk.snapshot else [], disk.records.after)
        except OSError as exc:
            self._history.fail(exc)
        writer = LogWriter(
            self._log_dir, self._opener, self._segment_bytes, disk.segments, self._log_runway
        )
        # The last segment is cut to its good end and a fresh one started, the same
        # path as after a failed write.
        writer.broken = disk.last
        error: OSError | None = None
        try:
            if disk.snapshot is not None:
                writer.delete_covered(disk.snapshot.lsn)
            writer.repair(disk.durable + 1)
        except OSError as exc:
            error = exc
        return disk, writer, error

    def _release(self) -> None:
        if self._lock_fd >= 0:
            fd, self._lock_fd = self._lock_fd, -1
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        for pool in (self._io, self._snap_io):
            if pool is not None:
                pool.shutdown()
        self._io = self._snap_io = None
