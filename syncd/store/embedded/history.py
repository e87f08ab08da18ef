"""The embedded store's history: the index (``history.py``) over the history
files (``history_files.py``), fed by the store's flush loop.

The store calls, in this order of a record's life:

1. :meth:`FileStoreHistory.checkpoints_for` when it queues records: checkpoint
   frames for the CRDTs that are due one, made from the engine's entry right
   now (the store applies and queues in one loop step, so the entry is the
   state right after the CRDT's last queued record);
2. :meth:`FileStoreHistory.write` in the log's I/O thread right after the main
   log's durable write of the same frames, then :meth:`FileStoreHistory.indexed`
   back on the loop with where they went (a batch's checkpoints after its
   records: one made at a CRDT's op N is indexed behind its ops N+1... of the
   batch, and counts their bytes towards the next checkpoint, ``_count_after``);
3. :meth:`FileStoreHistory.start_index_flush` right after, on the loop: once
   enough CRDTs changed, a new key directory table is written in the
   background (keydir.py, hint.py);
4. :meth:`FileStoreHistory.compact` after a snapshot, or when the history has grown
   by a segment: the index forgets what retention allows and dead segments go.

Reads (:meth:`FileStoreHistory.page`, :meth:`FileStoreHistory.base`) and compaction
hold one asyncio lock, so no read meets a segment being deleted.

If a history write fails the history is switched off (the main log, the
truth, goes on; the store refuses writes and the history's routes answer 503)
until :meth:`FileStoreHistory.reopen` reads it back from the log while the
store runs, once the disk takes a probe write again: the history files and
index as a start would open them (the torn tail cut, the records the history
lacks appended from the log), then it takes writes again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import msgpack

from syncd.errors import StoreUnavailable
from syncd.store.base import EntrySource, Loaded, Record, Retained, attribution
from syncd.store.embedded import hint as hint_file
from syncd.store.embedded.history_files import HistoryFiles, Scanned, split
from syncd.store.embedded.iothread import IoThread
from syncd.store.embedded.keydir import (
    Flush,
    KeyDir,
    positions_in,
    rewrite_table,
    segment_counts,
    write_table,
)
from syncd.store.embedded.log import HEADER_SIZE, frame
from syncd.store.history_index import CHECKPOINT_MIN_BYTES, Life, Retention

log = logging.getLogger("syncd.store")

_Key = tuple[str, str]

INLINE_READ_FRAMES: Final = 32
"""A load of at most this many frames reads them on the loop: from the page
cache a frame is a few microseconds, while the hop to the I/O thread and
back costs tens (perf.studies.zipf: the misses of a cache a fifth of the CRDTs
large). More frames, or a compaction running, go to the I/O thread."""
COPY_CHUNK_BYTES: Final = 1024 * 1024
"""Compaction appends the frames it copies at most about this much at a time:
a batch's frames wait for the append in progress (``HistoryFiles.append``),
so this bounds how long a commit waits behind a copy (a millisecond or so)."""


Written = tuple[bytes, Record, int]
"""A frame, the record it holds (for a checkpoint, ``{"kind": "checkpoint",
"ns", "id", "epoch", "seq"}`` without the state) and its LSN tag."""


def _is_entry(entry: Any) -> bool:
    """Whether ``entry`` (an entry map or an op record) names a CRDT life and seq."""
    return (
        isinstance(entry, dict)
        and type(entry.get("ns")) is str
        and type(entry.get("id")) is str
        and type(entry.get("epoch")) is str
        and type(entry.get("seq")) is int
    )


def _damaged(exc: OSError) -> StoreUnavailable:
    """A record read back that fails its check (the history files were damaged)."""
    log.error("%s", exc)
    return StoreUnavailable("a history record is damaged (see the server log)")


def _unbroken(
    chosen: list[tuple[int, int, Scanned]],
) -> list[tuple[int, int, Scanned]]:
    """The suffix of one life's frames (``(seq, is_checkpoint, frame)``, in
    ``(seq, is_checkpoint)`` order) that leads back from its newest op without
    a gap, a checkpoint bridging one: what the index held of it.

    Retention trims a life's ops up to its base checkpoint, and compaction
    then deletes the segments no position points into. The trimmed ops of
    another segment, kept alive by other CRDTs' frames, stay on disk: a scan
    of the segments (no usable key directory table) finds them, then no op
    at the checkpoint's seq, then the checkpoint and the ops after it. Fed
    in that order, the index took the missing op for a gap and started the
    life afresh after the checkpoint, with no base: the CRDT could not be
    loaded (410) though every op since its checkpoint was there. The frames
    before the gap are what retention had dropped; they are left out."""
    need = 0  # the lowest seq of the unbroken run so far (0: none yet)
    for i in range(len(chosen) - 1, -1, -1):
        seq, is_cp, _ = chosen[i]
        if not need:
            # The newest frame; a checkpoint newer than every op (one made
            # from a snapshot) is a base of its own.
            need = seq + 1 if is_cp else seq
        elif seq >= need - 1:
            if not is_cp:
                need = min(need, seq)
        else:
            return chosen[i + 1 :]
    return chosen


def _lost(scanned: list[Scanned], hint: hint_file.Header | None) -> list[tuple[int, int]]:
    """The LSN ranges missing between records the history holds (``scanned``,
    in file order, after the ``hint``'s end), where nothing was deleted.

    Every main-log record is written here in LSN order, so in file order each
    record newer than all before it (not a checkpoint, nor a copy compaction
    made) follows the previous one's LSN. The history is not fsynced per
    write: a crash of the machine may keep a later segment's pages and lose
    the end of the one before it (or pages inside it, where a scan stops).
    The next start took the highest LSN read for how far the history
    reached, and never appended those records again from the log: their
    CRDTs lost ops, or every base, for good. A jump between records of one
    segment or of two consecutive ones is such a loss; across a missing
    segment number it is compaction's (retention deleted the segment)."""
    out: list[tuple[int, int]] = []
    last = hint.last_lsn if hint is not None else 0
    last_segment = split(hint.end)[0] if hint is not None else -1
    for item in scanned:
        tag = item.tag
        if tag <= last or item.record.get("kind") == "checkpoint":
            continue
        segment = split(item.pos)[0]
        if last and tag > last + 1 and segment - last_segment <= 1:
            out.append((last + 1, tag - 1))
        last, last_segment = tag, segment
    return out


def _count_after(behind: list[tuple[Life, Record, int]], written: Sequence[Written]) -> None:
    """Start each life's count of op bytes towards its next checkpoint at the
    checkpoint of ``behind`` (the life, the checkpoint's record and size) that
    the index took after the life's later ops.

    A batch's checkpoints are written after its records (commit.py), so a
    checkpoint made at op N reaches the index behind the CRDT's ops N+1...
    of the same batch (concurrent writers of one CRDT). ``add_checkpoint``
    leaves the count alone then, and it stayed past due: the next op's batch
    wrote another checkpoint, and so on until one came last in its batch (a
    checkpoint every few ops under load, a full state each). Those ops are
    all in ``written`` (later ones are indexed later, and counted then): the
    count is their bytes."""
    for life, cp, size in behind:
        ns, crdt_id, epoch, seq = cp["ns"], cp["id"], cp["epoch"], cp["seq"]
        after = 0
        for data, record, _ in written:
            if (
                record.get("kind") == "op"
                and record.get("seq", 0) > seq
                and record.get("id") == crdt_id
                and record.get("ns") == ns
                and record.get("epoch") == epoch
            ):
                after += len(data) - HEADER_SIZE
        life.since_checkpoint = after
        life.checkpoint_due_at = max(CHECKPOINT_MIN_BYTES, size)


def _checkpoint_meta(entry: dict[str, Any]) -> Record:
    return {
        "kind": "checkpoint",
        "ns": entry["ns"],
        "id": entry["id"],
        "type": entry.get("type"),
        "epoch": entry["epoch"],
        "seq": entry["seq"],
    }


class FileStoreHistory:
    """The FileStore's history: its index (``.index``) over its history files
    (``.files``), kept in step with the store's flush loop."""

    def __init__(
        self,
        directory: str,
        retention: Retention,
        clock_ms: Callable[[], int],
        segment_bytes: int,
        index: KeyDir | None = None,
    ) -> None:
        self.retention = retention
        self.index = index if index is not None else KeyDir()
        """Where each CRDT's history lies, and its type and size."""
        self.directory = directory
        self.files = HistoryFiles(directory, segment_bytes)
        self.hint_lives = 0
        """Lives the index took from a hint file at open (0: none was used)."""
        self.last_lsn = 0
        """The highest main-log LSN the history holds."""
        self.broken = False
        """A write failed: nothing is written or read until :meth:`reopen`."""
        self.error: BaseException | None = None
        """Why the history is broken (the failed write's error, then the latest
        failed reopen's)."""
        self._reread_traced: set[type[BaseException]] = set()
        """The kinds of error a failed :meth:`reopen` logged with their traceback
        since the history broke: a repeat (at every probe) logs one line."""
        self.on_fail: Callable[[], None] | None = None
        """Called (from any thread) when a write failure switches the history off."""
        self._clock = clock_ms
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self.lock = asyncio.Lock()
        """Held by compaction, reads and backups: no read or copy meets a
        segment being deleted."""
        self._grown = 0
        """Bytes written since the last compaction."""
        self.compactions = 0
        self._index_io: IoThread | None = None
        """The thread new tables are written on (not the log's: a table at a
        million CRDTs takes seconds, which no commit should wait behind)."""
        self._index_flush: asyncio.Task[None] | None = None
        self.index_flushes = 0
        self._indexed_end = 0
        """Where the frames the index holds end (a new table's ``end``): every
        frame before it is indexed, or a copy compaction made of one."""
        self.index.on_flush_due = self._flush_due

    # -- opening (in the I/O thread, before anything else runs) ---------------

    def load(
        self,
        snapshot_entries: Iterable[dict[str, Any]],
        main_after: Callable[[int], Iterable[tuple[int, Record]]],
        main_last: int,
    ) -> None:
        """Read the history back (the index from the hint file, when there is a
        usable one, and the frames after it; else every frame), cut what it
        holds past ``main_last`` (the main log's last record: the log lost the
        rest, and will give their LSNs to other records), then append what the
        main log holds past it, and a checkpoint from the snapshot for every
        CRDT whose history does not reach the snapshot (a first start, or lost
        files)."""
        # Gaps are expected here (records lost with a damaged file), not
        # once the store runs: add_op logs only those.
        self.index.recovering = True
        try:
            self._load(snapshot_entries, main_after, main_last)
        finally:
            self.index.recovering = False

    def _load(
        self,
        snapshot_entries: Iterable[dict[str, Any]],
        main_after: Callable[[int], Iterable[tuple[int, Record]]],
        main_last: int,
    ) -> None:
        table = hint_file.open_table(self.directory, self.files.numbers())
        if table is not None and not self._hint_fits(table.header):
            log.warning("history index hint is ahead of the history files; reading them all")
            table.close()
            table = None
        if table is not None and table.header.last_lsn > main_last:
            log.warning(
                "history index hint holds records past the log's last sequence %d; "
                "reading the history files",
                main_last,
            )
            table.close()
            table = None
            hint_file.remove(self.directory)  # it names frames about to be cut
        if table is not None:
            self.index.attach(table)
            self.last_lsn = table.header.last_lsn
            self.hint_lives = len(table)
        scanned = self.files.open(table.header if table is not None else None, main_last)
        lost = _lost(scanned, table.header if table is not None else None)
        if lost:
            self._refill(scanned, lost, main_after)
        scanned += self._fitting(scanned, self.files.suspect, main_last)
        self._indexed_end = self.files.end()
        self._build(scanned)
        frames: list[Written] = []
        for entry in snapshot_entries:
            if not _is_entry(entry):
                continue  # not an engine's entry map (the store never needs one)
            life = self.index.get(entry["ns"], entry["id"])
            if life is None or life.epoch != entry["epoch"] or life.latest < entry["seq"]:
                body = self._pack({"kind": "checkpoint", "entry": entry})
                frames.append((frame(0, body), _checkpoint_meta(entry), 0))
                # What the history held of it cannot reach the snapshot: start afresh.
                self.index.deleted(entry["ns"], entry["id"])
        for lsn, record in main_after(self.last_lsn):
            frames.append((frame(lsn, self._pack(record)), record, lsn))
            if _is_entry(record):
                self.index.unmeasure(record["ns"], record["id"])
        if frames:
            data = b"".join(f for f, _, _ in frames)
            start = self.files.plan(len(data), len(frames))
            self.files.write(start, data)
            self._index_written(start, frames)
            self.files.sync()

    def _refill(
        self,
        scanned: list[Scanned],
        lost: list[tuple[int, int]],
        main_after: Callable[[int], Iterable[tuple[int, Record]]],
    ) -> None:
        """Append again the records of the LSN ranges ``lost`` that the main log
        still holds, as frames read back (``scanned``) so that the index is
        built with them in their place."""

        def within(lsn: int) -> bool:
            return any(lo <= lsn <= hi for lo, hi in lost)

        # Appended again at an earlier start, further on in the files.
        held = {s.tag for s in scanned if within(s.tag) and s.record.get("kind") != "checkpoint"}
        parts: list[tuple[bytes, int, Record]] = []
        for lsn, record in main_after(lost[0][0] - 1):
            if lsn > lost[-1][1]:
                break
            if within(lsn) and lsn not in held:
                parts.append((frame(lsn, self._pack(record)), lsn, record))
        if not parts:
            return
        log.warning(
            "history: %d records between log sequences %d and %d are missing before "
            "later ones (pages a crash lost): appended again from the log",
            len(parts),
            parts[0][1],
            parts[-1][1],
        )
        data = b"".join(f for f, _, _ in parts)
        pos = self.files.plan(len(data), len(parts))
        self.files.write(pos, data)
        self.files.sync()
        for f, lsn, record in parts:
            scanned.append(Scanned(pos, lsn, len(f) - HEADER_SIZE, record))
            pos += len(f)

    def _fitting(
        self, scanned: list[Scanned], suspect: list[Scanned], main_last: int
    ) -> list[Scanned]:
        """The damaged frames (``suspect``: they fail their CRC) to index where
        they lie: an op, not appended again from the log (``_refill``), that
        is next to the ops held of its life (the seq before or after it),
        where one is missing. Reading that CRDT's state (or its history
        across the op) then answers 503, "a history record is damaged", as
        for damage in frames the key directory's table names; left out, its
        life would have a gap, and its reads answer 410 as if retention had
        dropped the ops. A byte flipped in a frame's identity (namespace, id,
        life, seq) would make it fit no life's missing op: it is left out."""
        if not suspect:
            return []
        held = {s.tag for s in scanned if s.record.get("kind") != "checkpoint"}
        # Past the newest record held, the log's records are appended again
        # (``load``): a damaged one there is replaced, not indexed.
        newest = max((*held, self.last_lsn))
        seqs: dict[tuple[str, str, str], set[int]] = defaultdict(set)
        for item in scanned:
            record = item.record
            if record.get("kind") == "op" and _is_entry(record):
                seqs[(record["ns"], record["id"], record["epoch"])].add(record["seq"])
        out = []
        for item in suspect:
            record = item.record
            if (
                item.tag in held
                or item.tag > min(newest, main_last)
                or record.get("kind") != "op"
                or not _is_entry(record)
            ):
                continue
            ns, crdt_id, epoch, seq = record["ns"], record["id"], record["epoch"], record["seq"]
            near = seqs.get((ns, crdt_id, epoch), set())
            life = self.index.get(ns, crdt_id)
            before = seq - 1 in near or (
                life is not None and life.epoch == epoch and life.latest == seq - 1
            )
            if seq not in near and (before or seq + 1 in near):
                log.warning(
                    "history: the op at seq %d of %s/%s is damaged and no longer in the log: "
                    "reads of it answer 503",
                    seq,
                    ns,
                    crdt_id,
                )
                out.append(item)
        return out

    def _hint_fits(self, found: hint_file.Header) -> bool:
        """Whether the segments reach where the hint says the history ended."""
        number, offset = split(found.end)
        path = os.path.join(self.directory, f"{number:020d}.hist")
        try:
            size = os.path.getsize(path)
        except FileNotFoundError:
            return offset == 0
        return size >= offset

    # -- the key directory's table (keydir.py) -------------------------------------

    def _index_plan(self) -> Flush:
        """What a new table holds, taken on the loop: ``end`` is where the
        indexed frames end (a write between its ``write`` and its ``indexed``
        is after it, and read again at the next start). Frames are indexed
        only once their log batch is durable, so a table names no record of a
        batch a crash could tear; ``load`` drops one that names records past
        the log's last all the same (the log's tail cut for damage)."""
        header = hint_file.Header(
            end=self._indexed_end,
            last_lsn=self.last_lsn,
            segments=self.files.segment_counts(),
        )
        return self.index.flush_plan(header)

    def _write_table(self, plan: Flush) -> hint_file.Table:
        """Make the history durable (a table must not name frames a crash could
        lose), then write the table (index thread)."""
        self.files.sync()
        return write_table(self.directory, plan)

    def _flush_due(self) -> None:
        """Enough CRDTs changed outside a write (sizes the engine measured)."""
        loop = asyncio.get_running_loop()
        loop.call_soon(self.start_index_flush, loop)

    def start_index_flush(self, loop: asyncio.AbstractEventLoop) -> None:
        """Write a new table in the background if enough CRDTs changed (on the
        loop: after :meth:`indexed`, and when sizes changed enough)."""
        if (
            self.broken
            or self._index_flush is not None
            or self.lock.locked()
            or not self.index.flush_due
        ):
            return
        self._index_flush = loop.create_task(self._flush(loop, self._index_plan()))

    async def _flush(self, loop: asyncio.AbstractEventLoop, plan: Flush) -> None:
        try:
            if self._index_io is None:
                self._index_io = IoThread("syncd-index")
            table = await self._index_io.run(loop, self._write_table, plan)
        except Exception as exc:
            log.warning("writing the key directory's table failed (%s); retried later", exc)
            self.index.flush_failed()
        else:
            self.index.flushed(table)
            self.index_flushes += 1
            self._index_flush = None
            self.start_index_flush(loop)  # as many changed again meanwhile
        finally:
            if self._index_flush is asyncio.current_task():
                self._index_flush = None

    async def wait_index_flush(self) -> None:
        """Until no table is being written (one may follow another)."""
        while (task := self._index_flush) is not None:
            await asyncio.wait([task])

    async def close_index(self, loop: asyncio.AbstractEventLoop) -> None:
        """At a clean stop, once no write is in flight: the whole directory as a
        table, so the next start reads it and not the frames."""
        await self.wait_index_flush()
        if not self.broken:
            try:
                if self._index_io is None:
                    self._index_io = IoThread("syncd-index")
                table = await self._index_io.run(loop, self._write_table, self._index_plan())
            except Exception as exc:
                log.warning("writing the history index hint failed: %s", exc)
                self.index.flush_failed()
            else:
                self.index.flushed(table)
        self.index.close()
        if self._index_io is not None:
            self._index_io.shutdown()
            self._index_io = None

    def _build(self, scanned: list[Scanned]) -> None:
        per_key: dict[_Key, list[Scanned]] = defaultdict(list)
        deleted_at: dict[_Key, int] = {}
        last = self.last_lsn
        for item in scanned:
            record = item.record
            kind = record.get("kind")
            if kind == "checkpoint":
                entry: dict[str, Any] = record.get("entry") or {}
                if _is_entry(entry):
                    per_key[(entry["ns"], entry["id"])].append(item)
                continue
            last = max(last, item.tag)
            if not (_is_entry(record) or kind == "deleted"):
                continue  # not a record of the engine's (the log takes any map)
            key = (record["ns"], record["id"])
            if kind == "deleted":
                deleted_at[key] = max(deleted_at.get(key, 0), item.tag)
            elif kind == "op":
                per_key[key].append(item)
        self.last_lsn = last
        index = self.index
        for key, gone in deleted_at.items():
            # A life the hint holds that a later delete ended (and nothing since).
            later = [i.tag for i in per_key.get(key, ()) if i.record.get("kind") == "op"]
            if not later or max(later) < gone:
                index.deleted(*key)
        for key, items in per_key.items():
            ops = [i for i in items if i.record.get("kind") == "op"]
            newest = max(ops, key=lambda i: i.tag, default=None)
            epoch = newest.record["epoch"] if newest is not None else None
            if epoch is None:
                cps = [i for i in items if i.record.get("kind") == "checkpoint"]
                if not cps:
                    continue
                epoch = max(cps, key=lambda i: i.record["entry"]["seq"]).record["entry"]["epoch"]
            gone = deleted_at.get(key, 0)
            if newest is not None and newest.tag < gone:
                continue
            chosen: list[tuple[int, int, Scanned]] = []
            for item in items:
                record = item.record
                if record.get("kind") == "op":
                    if record.get("epoch") == epoch:
                        chosen.append((record["seq"], 0, item))
                elif record["entry"].get("epoch") == epoch:
                    chosen.append((record["entry"]["seq"], 1, item))
            chosen.sort(key=lambda c: (c[0], c[1]))
            chosen = _unbroken(chosen)
            ns, crdt_id = key
            # Changed after the hint (or no hint): its size is not known.
            index.unmeasure(ns, crdt_id)
            for seq, is_cp, item in chosen:
                if is_cp:
                    index.add_checkpoint(ns, crdt_id, epoch, seq, item.pos, item.size)
                else:
                    record = item.record
                    index.add_op(
                        ns,
                        crdt_id,
                        epoch,
                        seq,
                        record.get("ts", 0),
                        item.pos,
                        item.size,
                        *attribution(record),
                    )
            if chosen:
                newest_item = chosen[-1][2].record
                type_name = (
                    newest_item.get("type")
                    if newest_item.get("kind") == "op"
                    else newest_item["entry"].get("type")
                )
                if isinstance(type_name, str):
                    index.note_type(ns, crdt_id, type_name)

    # -- writing ---------------------------------------------------------------

    def checkpoints_for(
        self, records: Sequence[Record], lsn: int, entry: EntrySource
    ) -> list[Written]:
        """Checkpoint frames to write after ``records`` (the first has LSN ``lsn``)."""
        if self.broken:
            return []
        if len(records) == 1:  # one op per append, as most requests make
            record = records[0]
            if record.get("kind") != "op":
                return []
            ns, crdt_id = record["ns"], record["id"]
            if not self.index.checkpoint_due(ns, crdt_id):
                return []
            written = self._checkpoint(record, ns, crdt_id, lsn, entry)
            return [] if written is None else [written]
        last: dict[tuple[str, str], int] = {}
        for i, record in enumerate(records):
            if record.get("kind") == "op":
                last[(record["ns"], record["id"])] = i
        out: list[Written] = []
        for (ns, crdt_id), i in last.items():
            if self.index.checkpoint_due(ns, crdt_id):
                written = self._checkpoint(records[i], ns, crdt_id, lsn + i, entry)
                if written is not None:
                    out.append(written)
        return out

    def _checkpoint(
        self, record: Record, ns: str, crdt_id: str, lsn: int, entry: EntrySource
    ) -> Written | None:
        """The due checkpoint after ``record`` (LSN ``lsn``, its CRDT's last in
        the append); None when the CRDT has moved on meanwhile."""
        index = self.index
        current = entry(ns, crdt_id)
        if current is None or current["seq"] != record["seq"]:
            index.checkpoint_dropped(ns, crdt_id)
            return None
        body = self._pack({"kind": "checkpoint", "entry": current})
        return (frame(lsn, body), _checkpoint_meta(current), lsn)

    def write(self, data: bytes, nframes: int) -> int | None:
        """Append (in the I/O thread); where it went, or None once broken."""
        if self.broken:
            return None
        try:
            start = self.files.append(data, nframes)
        except OSError as exc:
            self.fail(exc)
            return None
        self._grown += len(data)
        return start

    def indexed(self, start: int, written: Sequence[Written]) -> None:
        """Frames written at ``start`` (in this order) enter the index."""
        try:
            self._index_written(start, written)
        except Exception as exc:  # never the log's flush loop: the history is secondary
            log.exception("indexing the history failed")
            self.fail(exc)

    def _index_written(self, start: int, written: Sequence[Written]) -> None:
        index = self.index
        pos = start
        # A batch is mostly runs of one CRDT's consecutive seqs: the op after
        # one add_op joined goes straight onto the same life (what add_op
        # would do, without its lookups), a tenth of the history's op cost.
        run: Life | None = None
        run_ns = run_id = run_epoch = None
        # Checkpoints indexed behind their CRDT's later ops (see _count_after).
        behind: list[tuple[Life, Record, int]] = []
        for data, record, lsn in written:
            length = len(data)
            size = length - HEADER_SIZE
            kind = record.get("kind")
            if kind == "op":
                seq = record.get("seq")
                if (
                    run is not None
                    and type(seq) is int
                    and seq == run.seqs[-1] + 1
                    and record.get("id") == run_id
                    and record.get("ns") == run_ns
                    and record.get("epoch") == run_epoch
                ):
                    run.seqs.append(seq)
                    run.ts.append(record.get("ts", 0))
                    run.pos.append(pos)
                    client_id, tag = attribution(record)
                    run.writers.append(client_id)
                    run.tags.append(tag)
                    run.since_checkpoint += size
                    if lsn > self.last_lsn:  # max(), without its call per record
                        self.last_lsn = lsn
                elif _is_entry(record):
                    run_ns, run_id, run_epoch = record["ns"], record["id"], record["epoch"]
                    run = index.add_op(
                        run_ns,
                        run_id,
                        run_epoch,
                        record["seq"],
                        record.get("ts", 0),
                        pos,
                        size,
                        *attribution(record),
                    )
                    type_name = record.get("type")
                    if isinstance(type_name, str):
                        index.note_type(run_ns, run_id, type_name)
                    if lsn > self.last_lsn:  # max(), without its call per record
                        self.last_lsn = lsn
                else:
                    run = None
            else:
                run = None  # a checkpoint or a delete may change the life
                if kind == "checkpoint":
                    ns, crdt_id, epoch, seq = (
                        record["ns"],
                        record["id"],
                        record["epoch"],
                        record["seq"],
                    )
                    index.add_checkpoint(ns, crdt_id, epoch, seq, pos, size)
                    life = index.get(ns, crdt_id)
                    if (
                        life is not None
                        and life.epoch == epoch
                        and life.cp_seqs
                        and life.cp_seqs[-1] == seq < life.latest
                    ):
                        behind.append((life, record, size))
                    type_name = record.get("type")
                    if isinstance(type_name, str):
                        index.note_type(record["ns"], record["id"], type_name)
                elif kind == "deleted" and "ns" in record and "id" in record:
                    index.deleted(record["ns"], record["id"])
                    if lsn > self.last_lsn:  # max(), without its call per record
                        self.last_lsn = lsn
            pos += length
        if pos > self._indexed_end:
            self._indexed_end = pos
        if behind:
            _count_after(behind, written)

    def fail(self, exc: BaseException) -> None:
        """Switch the history off after a failed write (any thread)."""
        if self.broken:
            return
        log.error(
            "writing the history failed (%s); history is off until it is re-read from "
            "the log once the disk takes writes again",
            exc,
        )
        self.error = exc
        self.broken = True
        if self.on_fail is not None:
            self.on_fail()

    async def reopen(
        self,
        loop: asyncio.AbstractEventLoop,
        io: IoThread,
        source: Callable[
            [], tuple[Iterable[dict[str, Any]], Callable[[int], Iterable[tuple[int, Record]]], int]
        ],
    ) -> bool:
        """Read a broken history back while the store runs, as a start does
        (:meth:`load`: the torn tail its failed write left is cut, the records
        it lacks are appended from the log), once a probe write in its
        directory succeeds; whether it takes writes again. ``source`` (run in
        ``io``, the log's I/O thread) gives what ``load`` takes: the snapshot's
        entries, the log's records after an LSN, and the log's last LSN. The
        caller sees to it that no record is written meanwhile (the store
        refuses appends while the history is broken, and waits for those in
        flight). The lock is held throughout, so no read, compaction or backup
        meets the files or the index being replaced; the new ones are made
        apart and put in place at once."""
        async with self.lock:
            await self.wait_index_flush()  # none starts while the lock is held
            if not self.broken:
                return True
            old_index, old_files = self.index, self.files
            fresh = FileStoreHistory(
                self.directory,
                self.retention,
                self._clock,
                old_files.segment_bytes,
                KeyDir(old_index.flush_lives, old_index.cached_lives),
            )

            def discard() -> None:
                fresh.index.close()
                fresh.files.close()

            def reread() -> None:
                fresh.files.probe()
                entries, after, last = source()
                try:
                    fresh.load(entries, after, last)
                except BaseException:
                    discard()
                    raise

            job = io.run(loop, reread)
            try:
                await job
            except asyncio.CancelledError:
                # (close() stops the prober): the re-read goes on in the
                # thread; what it opened is closed right after it, in order.
                with contextlib.suppress(RuntimeError):
                    io.run(loop, discard)
                raise
            except Exception as exc:
                self.error = exc
                if isinstance(exc, OSError):
                    log.debug("re-reading the history failed: %s", exc)
                elif type(exc) in self._reread_traced:
                    # The prober tries again every probe interval: one line each.
                    log.warning(
                        "re-reading the history failed again (%s: %s); tried again later",
                        type(exc).__name__,
                        " ".join(str(exc).split()),
                    )
                else:
                    self._reread_traced.add(type(exc))
                    log.exception("re-reading the history failed; tried again later")
                return False
            old_index.close()
            self.index, self.files = fresh.index, fresh.files
            self.index.on_flush_due = self._flush_due
            self.hint_lives = fresh.hint_lives
            self.last_lsn = fresh.last_lsn
            self._indexed_end = fresh._indexed_end
            self._grown = 0
            self.broken, self.error = False, None
            self._reread_traced.clear()
            await io.run(loop, old_files.close)
        log.warning(
            "the history was read back from the log up to sequence %d; it takes writes again",
            self.last_lsn,
        )
        return True

    @property
    def should_compact(self) -> bool:
        return not self.broken and self._grown >= self.files.segment_bytes

    # -- compaction --------------------------------------------------------------

    async def compact(self, loop: asyncio.AbstractEventLoop, io: IoThread) -> int:
        """Forget what retention allows, then delete or copy out dead segments;
        the segments deleted."""
        if self.broken:
            return 0
        async with self.lock:
            await self.wait_index_flush()  # none starts while the lock is held
            self._grown = 0
            # Compaction moves and deletes what the hint points at: a crash
            # before the new table is in place rebuilds it from the segments.
            await io.run(loop, hint_file.remove, self.directory)
            index = self.index
            retention, now = self.retention, self._clock()
            table = index.table
            index.compacting(retention, now)
            try:
                index.trim(retention, now)
                counts: Counter[int] = Counter(split(p)[0] for p in index.positions())
                # Only segments sealed now: the ones sealed while the table is
                # read hold frames indexed since, which ``counts`` lacks.
                sealed = split(self.files.end())[0]
                if table is not None:
                    counts.update(await io.run(loop, segment_counts, table, retention, now))
                empty, sparse = self.files.collectable_by_count(counts, sealed)
                moved: dict[int, int] = {}
                if sparse:
                    wanted = set(sparse)
                    live = {p for p in index.positions() if split(p)[0] in wanted}
                    if table is not None:
                        live.update(await io.run(loop, positions_in, table, retention, now, wanted))
                    try:
                        moved = await io.run(loop, self._copy, sorted(live))
                    except OSError as exc:
                        # Its part-written frames lie where later frames would
                        # follow them: a scan (a start without the table) would
                        # stop there and cut every frame after it.
                        self.fail(exc)
                        raise
                    index.relocate(moved)
                    index.compacting(retention, now, moved)
                if empty or sparse:
                    # The checkpoints retention kept as bases (and every frame
                    # after them) must be on disk before what they replace goes:
                    # a crash of the machine could leave a CRDT with no base.
                    try:
                        await io.run(loop, self.files.sync)
                    except OSError as exc:
                        self.fail(exc)
                        raise
                deleted = await io.run(loop, self.files.delete, [*empty, *sparse])
                if table is not None:
                    gone = {*empty, *sparse}
                    try:
                        new = await io.run(
                            loop, rewrite_table, self.directory, table, retention, now, moved, gone
                        )
                    except Exception as exc:
                        # The old table's rows name what was moved and deleted.
                        self.fail(exc)
                        raise
                    index.flushed_compacted(new)
            finally:
                index.compacting(None)
            self.compactions += 1
            return deleted

    def _copy(self, live: list[int]) -> dict[int, int]:
        frames = list(self.files.read_frames(sorted(live)))
        moved: dict[int, int] = {}
        # Appended a chunk at a time: the log's thread waits for the append
        # in progress before it appends a batch's frames (HistoryFiles.append).
        i = 0
        while i < len(frames):
            j, size = i, 0
            while j < len(frames) and (j == i or size + len(frames[j][1]) <= COPY_CHUNK_BYTES):
                size += len(frames[j][1])
                j += 1
            chunk = frames[i:j]
            pos = self.files.append(b"".join(f for _, f in chunk), len(chunk))
            for old, f in chunk:
                moved[old] = pos
                pos += len(f)
            i = j
        if moved:
            self.files.sync()
        return moved

    # -- reading -------------------------------------------------------------------

    async def page(
        self,
        loop: asyncio.AbstractEventLoop,
        io: IoThread,
        ns: str,
        crdt_id: str,
        epoch: str,
        latest: int,
        before: int | None,
        limit: int,
    ) -> tuple[list[Record], int]:
        self._check()
        async with self.lock:
            positions, oldest = self.index.page(ns, crdt_id, epoch, latest, before, limit)
            records = await io.run(loop, self._read, positions) if positions else []
        return records, oldest

    async def window(
        self,
        loop: asyncio.AbstractEventLoop,
        io: IoThread,
        ns: str,
        crdt_id: str,
        epoch: str,
        latest: int,
        since: int | None,
        most: int,
    ) -> tuple[Retained, int]:
        """``Store.history_window``: the frames read as they are (a few large
        reads), each checked and decoded only when the caller reads it."""
        self._check()
        async with self.lock:
            (positions, seqs, writers, tags), oldest = self.index.window(
                ns, crdt_id, epoch, latest, since, most
            )
            frames = await io.run(loop, self.files.read_raw, positions) if positions else None

        def load(i: int) -> Record:
            assert frames is not None
            try:
                return frames.decode(i)
            except OSError as exc:
                raise _damaged(exc) from None

        def encodings() -> list[bytes]:
            assert frames is not None
            try:
                return frames.bodies()
            except OSError as exc:
                raise _damaged(exc) from None

        return Retained(seqs, writers, tags, load, encodings if frames else None), oldest

    async def base(
        self,
        loop: asyncio.AbstractEventLoop,
        io: IoThread,
        ns: str,
        crdt_id: str,
        epoch: str,
        latest: int,
        seq: int,
    ) -> tuple[dict[str, Any] | None, list[Record]]:
        self._check()
        async with self.lock:
            cp, positions = self.index.base(ns, crdt_id, epoch, latest, seq)
            wanted = ([cp] if cp is not None else []) + positions
            got = await io.run(loop, self._read, wanted) if wanted else []
        if cp is not None:
            return got[0]["entry"], got[1:]
        return None, got

    async def since(
        self,
        loop: asyncio.AbstractEventLoop,
        io: IoThread,
        ns: str,
        crdt_id: str,
        epoch: str,
        since: int,
        most: int,
    ) -> list[Record] | None:
        """The durable ops of life ``epoch`` after seq ``since``, or None when
        the history does not hold every one of them or there are over ``most``."""
        async with self.lock:
            positions = self.index.since(ns, crdt_id, epoch, since, most)
            if positions is None:
                return None
            if not positions:
                return []
            try:
                return await io.run(loop, self.files.read, positions)
            except OSError as exc:
                # The caller sends the whole state instead (as for ops no
                # longer retained).
                log.error("%s", exc)
                return None

    def holds(self, ns: str, crdt_id: str, epoch: str, seq: int) -> bool:
        """Whether :meth:`current` rebuilds exactly life ``epoch`` at ``seq``."""
        return not self.broken and self.index.holds(ns, crdt_id, epoch, seq)

    async def current(
        self, loop: asyncio.AbstractEventLoop, io: IoThread, ns: str, crdt_id: str
    ) -> Loaded | None:
        """The CRDT's current life as the history holds it (a checkpoint and the
        ops after it), or None when it holds no life of it."""
        self._check()
        life = self.index.get(ns, crdt_id)
        if life is None:
            return None
        latest = life.latest
        cp, positions = self.index.base(ns, crdt_id, life.epoch, latest, latest)
        wanted = ([cp] if cp is not None else []) + positions
        if len(wanted) <= INLINE_READ_FRAMES and not self.lock.locked():
            # A few frames from the page cache: read here, in this step, so
            # no compaction can move them meanwhile (see INLINE_READ_FRAMES).
            got = self._read(wanted)
        else:
            async with self.lock:
                life = self.index.get(ns, crdt_id)
                if life is None:
                    return None
                latest = life.latest
                cp, positions = self.index.base(ns, crdt_id, life.epoch, latest, latest)
                wanted = ([cp] if cp is not None else []) + positions
                got = await io.run(loop, self._read, wanted) if wanted else []
        if cp is not None:
            return got[0]["entry"], got[1:]
        return None, got

    def _read(self, positions: list[int]) -> list[dict[str, Any]]:
        """``files.read``, with a frame that fails its check (or a read that
        fails) answered 503, not 500 (any thread)."""
        try:
            return self.files.read(positions)
        except OSError as exc:
            raise _damaged(exc) from None

    def _check(self) -> None:
        if self.broken:
            raise StoreUnavailable(
                "the history is unavailable until it recovers from a write failure "
                "(see the server log)"
            )
