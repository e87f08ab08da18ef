"""Compaction: the snapshot that lets the log be cut, and the history's retention.

Theory of operation
-------------------
When the log has grown by ``max(snapshot_every_bytes, size of the last
snapshot)`` since the last snapshot (the second term keeps the write
amplification of large states bounded), :meth:`Compaction.maybe_snapshot`
starts a snapshot: it calls the snapshot source on the loop. The caller must
apply an op to its memory and ``append`` its record in the same loop step, so
that at that moment the source's entries cover exactly the records appended so
far; and it must not mutate the exported maps later, as they are encoded in a
worker thread. The snapshot is published (renamed into place) only after those
records are durable; then the history files are fsynced (they must hold for
good what the log forgets), the segments the snapshot covers and older
snapshots are deleted, and the history's own compaction (its retention) runs.
Start-up reads the newest snapshot and only the log after it, so restart time
follows state size plus ``snapshot_every_bytes``, not history.

No snapshot is taken while the caller's memory is suspect (``state.py``: it
may hold records whose append failed, which a snapshot would make durable) nor
while the history takes no writes (the log behind a snapshot is then the only
other copy of the CRDTs the caller let go). ``lock`` is held while a snapshot
runs; a backup holds it too, since a snapshot deletes files the backup names.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from syncd.errors import ApiError, StoreUnavailable
from syncd.store.base import Record, SnapshotSource, StoreStats
from syncd.store.embedded.commit import GroupCommit
from syncd.store.embedded.history import FileStoreHistory
from syncd.store.embedded.iothread import IoThread
from syncd.store.embedded.log import LogWriter, Opener
from syncd.store.embedded.snapshot import SnapshotWriter, delete_older
from syncd.store.embedded.state import StoreState

log = logging.getLogger("syncd.store")

SNAPSHOT_EVERY_BYTES = 16 * 1024 * 1024
"""Log growth that triggers a snapshot: bounds the log replayed at start-up to
about 110k small op records (a second or two)."""


class Compaction:
    """Snapshots of the caller's state, the log cut behind them, and the history's
    compactions: one of each at a time, in the background."""

    def __init__(
        self,
        state: StoreState,
        commit: GroupCommit,
        history: FileStoreHistory,
        stats: StoreStats,
        *,
        snap_dir: str,
        opener: Opener,
        snapshot_every_bytes: int,
        ready: Callable[[], bool],
    ) -> None:
        self._state = state
        self._commit = commit
        self._history = history
        self._stats = stats
        self._snap_dir = snap_dir
        self._opener = opener
        self._snapshot_every = snapshot_every_bytes
        self._ready = ready
        """The store takes writes (the facade's ``ready``)."""
        self.source: SnapshotSource | None = None
        self.lock = asyncio.Lock()
        """Held by a snapshot (and by a backup, which no snapshot may run under)."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._history_tasks: set[asyncio.Task[Any]] = set()
        self._bytes_at_snapshot = 0
        self._last_snapshot_size = 0
        self._io: IoThread | None = None
        self._snap_io: IoThread | None = None
        self._writer: LogWriter | None = None

    def start(
        self, io: IoThread, snap_io: IoThread, writer: LogWriter, last_snapshot_size: int
    ) -> None:
        """The log as opened: its I/O thread, the snapshots' one, its writer."""
        self._io, self._snap_io, self._writer = io, snap_io, writer
        self._last_snapshot_size = last_snapshot_size

    def maybe_snapshot(self) -> None:
        """After a durable batch: start a snapshot if the log grew enough."""
        threshold = max(self._snapshot_every, self._last_snapshot_size)
        if (
            self.source is None
            or self._state.closing
            or self._state.suspect
            # The history holds the CRDTs the engine let go: while it takes no
            # writes, the log behind a snapshot is the only other copy of them.
            or self._history.broken
            or self.lock.locked()
            or self._commit.log_bytes - self._bytes_at_snapshot < threshold
        ):
            return
        task = asyncio.create_task(self._auto_snapshot(), name="syncd-snapshot")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _auto_snapshot(self) -> None:
        try:
            await self.snapshot()
        except ApiError:
            pass  # the log failed under it; the next growth tries again
        except Exception:
            log.exception("taking a snapshot failed; the next log growth tries again")
            self._bytes_at_snapshot = self._commit.log_bytes

    async def snapshot(self) -> int:
        """Take a snapshot now and compact the log behind it; the LSN it covers."""
        loop = asyncio.get_running_loop()
        assert self._io is not None and self._snap_io is not None and self._writer is not None
        commit = self._commit
        async with self.lock:
            source = self.source
            if source is None or not self._ready():
                raise StoreUnavailable("storage is not ready for a snapshot")
            if self._state.suspect:
                raise StoreUnavailable("no snapshot until reload(): memory may hold failed records")
            # The caller applies and appends in one loop step, so right now the
            # source's entries cover exactly the records appended so far.
            entries = list(source())
            covered = commit.next_lsn - 1
            mark = commit.log_bytes + commit.pending_bytes
            # (The store takes writes, checked above in this same loop step.)
            barrier = commit.enqueue(())
            writer = SnapshotWriter(self._snap_dir, covered, self._opener)
            try:
                await self._snap_io.run(loop, writer.write_entries, entries)
                del entries
                await barrier  # publish only what is durable
                # A start reads the log after the snapshot only, and appends to
                # the history what the log holds past the history's end: the
                # history must hold for good every record the snapshot covers
                # before it is published (the log behind it is skipped then).
                await self._io.run(loop, self._history_durable, covered)
                tail: list[Record] = []  # replays come from the history files
                size = await self._snap_io.run(loop, writer.finish, tail)
            except BaseException:
                await self._snap_io.run(loop, writer.abort)
                raise
            self._bytes_at_snapshot = mark
            self._last_snapshot_size = size
            self._stats.snapshots += 1
            try:
                deleted = await self._io.run(loop, self._compact_sync, covered)
            except OSError as exc:
                log.warning("compacting the log behind snapshot %d failed: %s", covered, exc)
                deleted = 0
            self.start_history_compaction()
            log.info(
                "snapshot at log sequence %d (%d bytes) published; %d segments deleted",
                covered,
                size,
                deleted,
            )
            return covered

    def _history_durable(self, covered: int) -> None:
        """Sync the history files, which hold every record up to ``covered``
        (in the log's I/O thread, where they are written); StoreUnavailable when
        they cannot (or could not) take them: the snapshot is not published."""
        history = self._history
        if not history.broken:
            try:
                history.files.sync()
            except OSError as exc:
                history.fail(exc)
        if history.broken:
            raise StoreUnavailable(
                f"no snapshot at log sequence {covered}: the history files do not hold "
                f"every record it covers"
            )

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

    def start_history_compaction(self) -> None:
        """Apply the history's retention in the background, unless it runs already."""
        if self._history_tasks or self._state.closing or self._snap_io is None:
            return
        task = asyncio.create_task(self._compact_history(), name="syncd-history-compaction")
        self._history_tasks.add(task)
        task.add_done_callback(self._history_tasks.discard)

    async def compact_history(self) -> int:
        """Apply the retention to the history now; the history segments deleted."""
        assert self._snap_io is not None
        return await self._history.compact(asyncio.get_running_loop(), self._snap_io)

    async def _compact_history(self) -> None:
        try:
            await self.compact_history()
        except Exception:
            log.exception("compacting the history failed; the next growth tries again")

    async def wait_history(self) -> None:
        """Let a running history compaction end (close: it writes the history files)."""
        for task in list(self._history_tasks):
            with contextlib.suppress(Exception):  # (it logs its own failure)
                await task
