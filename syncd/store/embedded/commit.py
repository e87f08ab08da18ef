"""Group commit: appends queued on the loop, written and fsynced in batches.

Theory of operation
-------------------
``enqueue`` encodes and frames an append's records on the loop, gives them the
next log sequence numbers (LSNs) and queues them as one :class:`Group`, with
the history checkpoints of the CRDTs due one (taken in that same loop step, so
each is the state right after its CRDT's last record there). An append is one
request, applied whole or not at all: each of its records but the last is
marked as followed by more (``log.mark_more``), so that a crash tearing its
write is cut back to its first record (see ``log.py``). One flusher task
takes everything queued (up to ``max_batch_bytes``: whole groups), marks the
first record of the batch (``FLAG_BATCH_START``), writes it with one
``pwrite`` and one ``fsync`` in the store's I/O thread while the next batch
fills, then resolves the appends of that batch in the order they were made.
``fsync="always"`` writes and fsyncs every append call on its own; ``"never"``
writes without fsync, inline (tests and benchmarks). An empty append is a
barrier: it resolves once everything queued before it is durable.

After each durable write the same frames, and the checkpoints, are appended to
the history files (``history.FileStoreHistory``; not fsynced per write: the log
is the truth).

When a write or fsync fails, the batch and everything queued behind it (their
LSNs followed it) fail with 503 and the next LSN goes back to the last durable
one. What the store does about it (refusing writes, probing the disk, telling
the caller) is the facade's: the group commit calls its ``failed`` and
``doubted`` hooks. The flusher stops once the store is closing and the queue is
empty (``state.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgpack

from syncd.errors import StoreUnavailable
from syncd.store.base import EntrySource, Record, StoreStats
from syncd.store.embedded.history import FileStoreHistory, Written
from syncd.store.embedded.iothread import IoThread
from syncd.store.embedded.log import (
    FLAG_BATCH_START,
    HEADER,
    HEADER_SIZE,
    MAX_RECORD_BYTES,
    WORD_TAG,
    LogWriter,
    frame,
    mark_more,
)
from syncd.store.embedded.state import StoreState

log = logging.getLogger("syncd.store")

_HEADER_PACK = HEADER.pack
_WORD_TAG_PACK = WORD_TAG.pack
_crc32 = zlib.crc32

MAX_BATCH_BYTES = 4 * 1024 * 1024
"""One write+fsync carries at most about this much (whole appends), so one slow
batch does not hold back the acknowledgement of everything queued behind it."""


@dataclass(slots=True)
class Group:
    """The records of one ``append`` call."""

    future: asyncio.Future[None]
    records: list[Record]
    frames: list[bytes]
    first_lsn: int
    size: int
    checkpoints: list[Written]
    """History checkpoints to write after these records."""


class GroupCommit:
    """The queue of appends and the flusher that makes them durable."""

    def __init__(
        self,
        state: StoreState,
        history: FileStoreHistory,
        stats: StoreStats,
        *,
        fsync_mode: str,
        max_batch_bytes: int,
        on_commit: Callable[[float], None] | None,
        on_written: Callable[[int], None] | None,
        failed: Callable[[BaseException], None],
        doubted: Callable[[BaseException], None],
        durable_batch: Callable[[], None],
        history_grown: Callable[[], None],
    ) -> None:
        self._state = state
        self._history = history
        self._stats = stats
        self._fsync_mode = fsync_mode
        self._max_batch = max_batch_bytes
        self.on_commit = on_commit
        """Called with the seconds each durable batch took to write (and sync)."""
        self.on_written = on_written
        """Called with the count of records each durable batch held."""
        self._failed = failed
        """A batch failed: the store refuses writes until the disk takes them."""
        self._doubted = doubted
        """Records the caller may have applied failed: its memory may be ahead."""
        self._durable_batch = durable_batch
        """A batch with records is durable (the log grew: a snapshot may be due)."""
        self._history_grown = history_grown
        """The history is due a compaction."""
        self.entry: EntrySource | None = None
        """The state of one CRDT, for the history's checkpoints (the caller's)."""

        self.next_lsn = 1
        self.durable = 0
        """The last LSN written (and synced, unless fsync is "never")."""
        self.log_bytes = 0
        """Bytes in the log past the newest snapshot, as of open, plus those written since."""
        self.pending_bytes = 0
        self._pending: deque[Group] = deque()
        self._packer = msgpack.Packer(use_bin_type=True)
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._io: IoThread | None = None
        self._writer: LogWriter | None = None

    def start(
        self,
        loop: asyncio.AbstractEventLoop,
        io: IoThread,
        writer: LogWriter,
        durable: int,
        log_bytes: int,
    ) -> None:
        """Take appends after ``durable`` (the log as recovered) and start the flusher."""
        self._loop, self._io, self._writer = loop, io, writer
        self.durable = durable
        self.next_lsn = durable + 1
        self.log_bytes = log_bytes
        self._flusher = asyncio.create_task(self._flush_loop(), name="syncd-log-flusher")

    async def drain(self) -> None:
        """Once the store is closing: wait for the flusher to write what is queued."""
        self._wake.set()
        if self._flusher is not None:
            await self._flusher

    def enqueue(self, records: Sequence[Record]) -> asyncio.Future[None]:
        """Queue one append (the store takes writes: the facade checked); its future."""
        lsn = self.next_lsn
        frames: list[bytes] = []
        size = 0
        pack = self._packer.pack
        # The records of this request still to come after the one being framed:
        # each but the last is marked as followed by more of its request, so a
        # crash that tears the request's write is cut back to its first record
        # (see log.py on torn requests). A request of one record (one op, the
        # common case) is framed as it is.
        more = len(records) - 1
        try:
            for record in records:
                if not isinstance(record, dict):
                    raise TypeError(f"a log record is a dict, not {type(record).__name__}")
                body = pack(record)
                if more:
                    body = mark_more(body)
                    more -= 1
                length = len(body)
                if length > MAX_RECORD_BYTES:
                    # Not durable, like a failed write: the caller may have applied it.
                    raise StoreUnavailable(
                        f"a log record of {length} bytes is over the {MAX_RECORD_BYTES}-byte limit",
                        status=413,
                        code="payload_too_large",
                    )
                # log.frame(lsn, body), inline: once per record.
                framed = _HEADER_PACK(
                    length, _crc32(body, _crc32(_WORD_TAG_PACK(length, lsn))), lsn
                )
                frames.append(framed + body)
                size += HEADER_SIZE + length
                lsn += 1
        except BaseException as exc:
            self._doubted(exc)  # the caller may already have applied these records
            raise
        assert self._loop is not None  # set by start()
        # Not asyncio.get_running_loop(): on Python 3.11 each call is a getpid()
        # system call, and this runs once per op.
        future: asyncio.Future[None] = self._loop.create_future()
        checkpoints: list[Written] = []
        if self.entry is not None and records:
            # Now, in the loop step that applied them: the entry is the state
            # right after each CRDT's last record here.
            checkpoints = self._history.checkpoints_for(records, self.next_lsn, self.entry)
        group = Group(future, list(records), frames, self.next_lsn, size, checkpoints)
        self._pending.append(group)
        self.pending_bytes += size
        self.next_lsn = lsn
        self._wake.set()
        return future

    def _take_batch(self) -> list[Group]:
        batch: list[Group] = []
        pending = self._pending
        always = self._fsync_mode == "always"
        limit = self._max_batch
        size = 0
        carries = False
        while pending:
            group = pending[0]
            if group.records:
                if carries and (always or size + group.size > limit):
                    break
                carries = True
            batch.append(pending.popleft())
            size += group.size
        self.pending_bytes -= size
        return batch

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        writer = self._writer
        io = self._io
        assert writer is not None and io is not None
        state = self._state
        stats = self._stats
        sync = self._fsync_mode != "never"
        while True:
            if not self._pending:
                if state.closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = self._take_batch()
            parts: list[bytes] = []
            written: list[Written] = []
            checkpointed: list[Written] = []
            first_lsn = 0
            for group in batch:
                records = group.records
                if not records:
                    continue
                lsn = group.first_lsn
                if not parts:
                    first_lsn = lsn
                # (frame, record, LSN) of each record, in C.
                written.extend(
                    zip(group.frames, records, range(lsn, lsn + len(records)), strict=True)
                )
                parts.extend(group.frames)
                if group.checkpoints:
                    checkpointed += group.checkpoints
            count = len(written)
            if count:
                # Mark the batch's first record: see log.py on torn batches. Its
                # length is unchanged (the flag is in the length word), so the
                # history's positions taken from the enqueued frames still hold.
                parts[0] = frame(first_lsn, parts[0][HEADER_SIZE:], FLAG_BATCH_START)
                data = b"".join(parts)
                history_data = data
                if checkpointed:
                    history_data = data + b"".join([cp[0] for cp in checkpointed])
                    written += checkpointed
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
                    stats.fsyncs = writer.fsyncs
                    self._fail(exc, batch)
                    continue
                if self.on_commit is not None:
                    self.on_commit(time.perf_counter() - started)
                self.durable = first_lsn + count - 1
                self.log_bytes += len(data)
                stats.fsyncs = writer.fsyncs
                stats.batches += 1
                stats.records_written += count
                stats.bytes_written += len(data)
                if at is not None:
                    self._history.indexed(at, written)
                    self._history.start_index_flush(loop)
                    if self._history.should_compact:
                        self._history_grown()
            for group in batch:
                if not group.future.done():
                    group.future.set_result(None)
            if count:
                if self.on_written is not None:
                    try:
                        self.on_written(count)
                    except Exception:
                        log.exception("on_written callback failed")
                self._durable_batch()

    def _write(
        self, data: bytes, first_lsn: int, sync: bool, history_data: bytes, frames: int
    ) -> int | None:
        """The log's write, then the history's (in the log's I/O thread, or
        inline without fsync); where the history's went, None if it did not."""
        assert self._writer is not None
        self._writer.write(data, first_lsn, sync)
        return self._history.write(history_data, frames)

    def _fail(self, exc: BaseException, batch: list[Group]) -> None:
        """Fail the batch and everything queued behind it (their LSNs followed it)."""
        groups = [*batch, *self._pending]
        for group in groups:
            for _, meta, _ in group.checkpoints:
                self._history.index.checkpoint_dropped(meta["ns"], meta["id"])
        self._pending.clear()
        self.pending_bytes = 0
        self.next_lsn = self.durable + 1
        self._stats.failures += 1
        self._failed(exc)
        reason = getattr(exc, "strerror", None) or str(exc)
        for group in groups:
            if not group.future.done():
                group.future.set_exception(StoreUnavailable(f"storage write failed: {reason}"))
        if any(group.records for group in groups):
            self._doubted(exc)
