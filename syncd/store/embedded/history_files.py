"""The embedded store's history files: past op records and checkpoints, by position.

Theory of operation
-------------------
The main log (``log.py``) is compacted behind each snapshot, so it cannot also
be the history. The history lives in its own segments in ``<data>/history``,
named ``<number>.hist``, in the main log's frame format (``log.frame``):

- after each durable write of the main log, the same frames (op and delete
  records, tagged with their LSN) are appended here, followed by checkpoint
  frames (``{"kind": "checkpoint", "entry": <entry map>}``, tagged with the
  LSN of the op they follow);
- nothing here is fsynced per write: the main log is the truth. The history
  is fsynced before the main log drops segments behind a snapshot, and after
  a crash the records past the history's last LSN are appended again from the
  main log (``FileStoreHistory.last_lsn``), and so are those missing before
  later ones (a machine's crash may keep a segment's pages and lose the end
  of the one before: ``history._lost``). A torn tail is cut at open.
- the other way round, the history may hold records the main log no longer
  does: records of the log's tail cut at open (damaged after they were
  written whole), or records the history got but the log lost
  (``fsync="never"``).
  Their LSNs will be given to other records, so :meth:`HistoryFiles.open`
  cuts every frame tagged past the log's last LSN (:meth:`HistoryFiles._cut`).
- a bad frame with good frames after it is not a torn tail: damage (a
  flipped byte) or pages a machine's crash lost in the middle of what was
  written. The scan goes on at the next frame that verifies (``_next_frame``)
  and the damaged range is logged once: the frames after it are kept, and
  the records the range held are appended again from the main log while it
  holds them (``history._lost``). One damaged op frame that still reads as
  an op next to its life's ops (``FileStoreHistory._fitting``) is indexed where it
  lies, so that its CRDT's reads answer 503 (the CRC fails), as for damage
  found when reading. Only what follows the last good frame is a tail.

A record's *position* is ``segment number << 36 | offset``; the index
(``history.py``) holds positions and this module reads them back.

Compaction: once the index has forgotten what retention no longer asks for,
a sealed segment that no position points into is deleted; one that is
mostly forgotten has its remaining records copied to the head first
(``MAX_LIVE_SHARE``), so a CRDT written long ago does not keep a whole old
segment alive. Copies keep their LSN tags; at open, per CRDT, records are
ordered by seq and the copy and its original are one.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import struct
import threading
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from syncd.store.embedded.hint import Header
from syncd.store.embedded.log import (
    HEADER,
    HEADER_SIZE,
    LENGTH_MASK,
    PROBE_BYTES,
    PROBE_NAME,
    decode_map,
    fsync_dir,
    remove_probe,
)

log = logging.getLogger("syncd.store")

HISTORY_SEGMENT_BYTES: Final = 16 * 1024 * 1024
"""As the main log's segments: compaction copies or deletes whole segments."""

MAX_LIVE_SHARE: Final = 0.5
"""A sealed segment with at most this share of its records still indexed is
compacted (the rest copied to the head): copying costs at most as much as it
frees."""

MAX_FRAME_BYTES: Final = LENGTH_MASK
"""The longest frame a scan reads: as long as a length word says (2 GiB), not
the main log's bound on an op record (``MAX_RECORD_BYTES``, 64 MiB). A
checkpoint frame is a CRDT's whole entry (its state and remembered op ids), so
a CRDT near ``SERVICE_MAX_CRDT_BYTES`` (64 MiB by default, no bound when 0)
makes one past 64 MiB; held to the op bound, a scan took it for damage and cut
every frame after it as a torn tail. A damaged length word is still caught: by
the file's end, the CRC or the body's decoding."""

_WORD_CRC: Final = struct.Struct("<II")
"""A frame header's first two words: length (and flags) and CRC."""

READ_SPAN: Final = 1024 * 1024
"""Bytes one ``pread`` of :meth:`HistoryFiles.read_raw` spans at most: a
revert's window of ten thousand ops is a few of them instead of twenty
thousand (two per frame), and the memory they take stays bounded."""

READ_GAP: Final = 64 * 1024
"""Bytes between two wanted frames past which they are read apart: frames of
other CRDTs in between are read along (from the page cache, at memory
speed) only while they are few."""

OFFSET_BITS: Final = 36
_OFFSET_MASK: Final = (1 << OFFSET_BITS) - 1
_NAME_RE: Final = re.compile(r"^(\d{20})\.hist$")


def position(segment: int, offset: int) -> int:
    return segment << OFFSET_BITS | offset


def split(pos: int) -> tuple[int, int]:
    return pos >> OFFSET_BITS, pos & _OFFSET_MASK


class RawFrames:
    """Frames as :meth:`HistoryFiles.read_raw` read them: frame ``i`` lies in
    ``spans[span_of[i]]`` at offset ``at[i]`` (a span is read with the
    frames near it)."""

    __slots__ = ("at", "directory", "span_of", "spans")

    def __init__(self, spans: list[bytes], span_of: list[int], at: list[int], directory: str):
        self.spans = spans
        self.span_of = span_of
        self.at = at
        self.directory = directory

    def __len__(self) -> int:
        return len(self.at)

    def body(self, i: int) -> bytes:
        """Frame ``i``'s body (its encoded record), once its CRC matches
        (OSError otherwise)."""
        data, at = self.spans[self.span_of[i]], self.at[i]
        if len(data) - at < HEADER_SIZE:
            raise OSError(f"a history record in {self.directory} is cut short")
        word, crc = _WORD_CRC.unpack_from(data, at)
        end = at + HEADER_SIZE + (word & LENGTH_MASK)
        # The CRC covers the length word, the tag and the body (log.frame).
        if end > len(data) or zlib.crc32(data[at + 8 : end], zlib.crc32(data[at : at + 4])) != crc:
            raise OSError(f"a history record in {self.directory} is damaged")
        return data[at + HEADER_SIZE : end]

    def bodies(self) -> list[bytes]:
        """:meth:`body` of every frame, in order (for a reader of them all)."""
        crc32, head, size = zlib.crc32, _WORD_CRC.unpack_from, HEADER_SIZE
        spans, span_of = self.spans, self.span_of
        out: list[bytes] = []
        for i, at in enumerate(self.at):
            data = spans[span_of[i]]
            if len(data) - at < size:
                raise OSError(f"a history record in {self.directory} is cut short")
            word, crc = head(data, at)
            end = at + size + (word & LENGTH_MASK)
            if end > len(data) or crc32(data[at + 8 : end], crc32(data[at : at + 4])) != crc:
                raise OSError(f"a history record in {self.directory} is damaged")
            out.append(data[at + size : end])
        return out

    def decode(self, i: int) -> dict[str, Any]:
        """Frame ``i``'s record, once its CRC matches (OSError otherwise)."""
        record = decode_map(self.body(i))
        if record is None:
            raise OSError(f"a history record in {self.directory} is not a map")
        return record


_FRAME_HINT: Final = re.compile(rb"\x00\x00\x00[\x80-\x8f\xde\xdf]")
"""What lies 13 bytes into nearly every frame: the top three bytes of its
tag (an LSN below 2**40) and the first byte of its body, a msgpack map's
header. A search for the next good frame after damage checks (CRC, body)
only where this matches, not at every byte."""

_HINT_AT: Final = 13


def _frame_at(data: bytes, off: int, end: int) -> tuple[int, bytes, dict[str, Any]] | None:
    """The frame at ``off`` (its tag, body and record) if it is whole, its CRC
    matches and its body is one map; else None."""
    if end - off < HEADER_SIZE:
        return None
    word, crc, tag = HEADER.unpack_from(data, off)
    length = word & LENGTH_MASK
    stop = off + HEADER_SIZE + length
    if length == 0 or length > MAX_FRAME_BYTES or stop > end:
        return None
    body = data[off + HEADER_SIZE : stop]
    if zlib.crc32(body, zlib.crc32(data[off : off + 4] + data[off + 8 : off + 16])) != crc:
        return None
    record = decode_map(body)
    if record is None:
        return None
    return tag, body, record


def _next_frame(data: bytes, start: int, end: int) -> int | None:
    """The offset of the first good frame (:func:`_frame_at`) at or after
    ``start``, or None. A good frame after a bad one says the bad one is
    damage (a flipped byte, or pages a machine's crash lost in the middle
    of what was written), not a torn tail: what follows it is kept."""
    for match in _FRAME_HINT.finditer(data, start + _HINT_AT, end):
        at = match.start() - _HINT_AT
        if _frame_at(data, at, end) is not None:
            return at
    return None


@dataclass(slots=True)
class Scanned:
    """One frame read back at open."""

    pos: int
    tag: int
    size: int
    record: dict[str, Any]


class HistoryFiles:
    """The history segments; blocking calls, made from I/O threads."""

    def __init__(self, directory: str, segment_bytes: int = HISTORY_SEGMENT_BYTES) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self._sizes: dict[int, int] = {}
        """Segment number -> bytes written (the last one is the active one)."""
        self._frames: Counter[int] = Counter()
        """Segment number -> frames written."""
        self._fds: dict[int, int] = {}
        self._dirty: set[int] = set()
        self._active = 0
        self._planned = 0
        """Bytes of the active segment handed out by ``plan`` (ahead of writes)."""
        self.suspect: list[Scanned] = []
        """Frames that failed their CRC at open, in ranges of damage followed
        by good frames, yet read as a record (see :meth:`_scan`)."""
        self._mutex = threading.Lock()
        """Appends (the log's I/O thread) and compaction's copies (another) share
        the active segment, the file descriptors and the dirty set."""
        self._appending = threading.Lock()
        """Held by :meth:`append` from its plan until its bytes are written."""

    # -- opening -------------------------------------------------------------

    def numbers(self) -> list[int]:
        """The segment numbers on disk, ascending."""
        os.makedirs(self.directory, exist_ok=True)
        return sorted(
            int(m.group(1)) for name in os.listdir(self.directory) if (m := _NAME_RE.match(name))
        )

    def open(self, hint: Header | None = None, last_lsn: int | None = None) -> list[Scanned]:
        """Read the segments back (cutting a torn tail); what they hold. With a
        ``hint``, the frames before its ``end`` are taken as read (the hint
        holds their index; its ``last_lsn`` must not be past ``last_lsn``) and
        only those after it are scanned. With ``last_lsn`` (the main log's last
        record), the frames tagged past it are cut (:meth:`_cut`)."""
        found = self._open(hint)
        if last_lsn is None:
            return found
        past = next((s.pos for s in found if s.tag > last_lsn), None)
        if past is None:
            return found
        self._cut(found, past, last_lsn)
        self._forget()
        return self._open(hint)

    def _open(self, hint: Header | None) -> list[Scanned]:
        numbers = self.numbers()
        found: list[Scanned] = []
        self.suspect = []
        end_number, end_offset = split(hint.end) if hint is not None else (0, 0)
        for i, number in enumerate(numbers):
            if hint is not None and number < end_number and number in hint.segments:
                size, frames = hint.segments[number]
                self._sizes[number] = size
                self._frames[number] = frames
                continue
            start = end_offset if hint is not None and number == end_number else 0
            damaged: list[tuple[int, int]] = []
            good_end = self._scan(number, found, start, damaged, self.suspect)
            if start:
                self._frames[number] += hint.segments.get(number, (0, 0))[1] if hint else 0
            path = self._path(number)
            for first, after in damaged:
                log.warning(
                    "history %s: damaged from offset %d to %d, with good frames after it: "
                    "those are kept; the records the damage held are appended again from "
                    "the log while it holds them, else they are missing from the history",
                    path,
                    first,
                    after,
                )
            if os.path.getsize(path) != good_end:
                if i == len(numbers) - 1:
                    log.warning("history %s: cut a torn tail at %d", path, good_end)
                    with open(path, "r+b") as f:
                        f.truncate(good_end)
                        # Durable before new frames go there: a crash must not
                        # bring the cut bytes back behind them, where a scan
                        # (which goes on past damage) would read good frames among them.
                        os.fsync(f.fileno())
                else:
                    log.warning(
                        "history %s: damaged after offset %d; the rest is lost", path, good_end
                    )
            self._sizes[number] = good_end
        self._active = numbers[-1] if numbers else 1
        self._sizes.setdefault(self._active, 0)
        self._planned = self._sizes[self._active]
        return found

    def _cut(self, found: list[Scanned], at: int, last_lsn: int) -> None:
        """Cut the history at position ``at`` (its first frame tagged past
        ``last_lsn``), keeping the later frames tagged up to it: copies that
        compaction made (their originals may be gone). Those are written to a
        new segment first and made durable, then the segments are cut behind
        ``at``: a crash part way leaves frames past ``last_lsn`` that the next
        start cuts the same way (copies of copies are one, as any copies)."""
        numbers = self.numbers()
        keep = [s.pos for s in found if s.pos > at and s.tag <= last_lsn]
        cut = sum(1 for s in found if s.pos >= at and s.tag > last_lsn)
        number, offset = split(at)
        log.warning(
            "history %s: %d frames from offset %d on hold records past the log's last "
            "sequence %d (the log lost them): cutting them (%d later frames kept)",
            self._path(number),
            cut,
            offset,
            last_lsn,
            len(keep),
        )
        target = numbers[-1] + 1
        if keep:
            data = b"".join(frame for _, frame in self.read_frames(keep))
            self._write_new(target, data)
        with open(self._path(number), "r+b") as f:
            f.truncate(offset)
            os.fsync(f.fileno())
        for later in numbers:
            if later > number:
                os.unlink(self._path(later))
        fsync_dir(self.directory)

    def _write_new(self, number: int, data: bytes) -> None:
        """A new segment holding ``data``, made durable."""
        with open(self._path(number), "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(self.directory)

    def _forget(self) -> None:
        """Back to as constructed, to open again."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._sizes.clear()
        self._frames.clear()
        self._dirty.clear()
        self._active = self._planned = 0

    def _scan(
        self,
        number: int,
        out: list[Scanned],
        start: int = 0,
        damaged: list[tuple[int, int]] | None = None,
        suspect: list[Scanned] | None = None,
    ) -> int:
        """Append segment ``number``'s frames from ``start`` on to ``out``; the
        offset after the last good one. A bad frame followed by frames that
        verify is damage inside the segment, not its tail: the scan goes on at
        the next good frame (:func:`_next_frame`), and the damaged range
        ``(from, to)`` goes to ``damaged``; when the range is one frame whose
        body still reads as a map (its length word intact, a byte of its body
        flipped), that frame goes to ``suspect``, unchecked. Only what follows
        the last good frame is a tail."""
        with open(self._path(number), "rb") as f:
            f.seek(start)
            data = f.read()
        off = 0
        end = len(data)
        count = 0
        while off + HEADER_SIZE <= end:
            found = _frame_at(data, off, end)
            if found is None:
                resume = _next_frame(data, off + 1, end)
                if resume is None:
                    break  # nothing good follows: a torn tail
                if damaged is not None:
                    damaged.append((start + off, start + resume))
                if suspect is not None:
                    word, _, tag = HEADER.unpack_from(data, off)
                    if off + HEADER_SIZE + (word & LENGTH_MASK) == resume:
                        body = data[off + HEADER_SIZE : resume]
                        record = decode_map(body)
                        if record is not None:
                            pos = position(number, start + off)
                            suspect.append(Scanned(pos, tag, len(body), record))
                off = resume
                continue
            tag, body, record = found
            out.append(Scanned(position(number, start + off), tag, len(body), record))
            count += 1
            off += HEADER_SIZE + len(body)
        self._frames[number] = count
        return start + off

    # -- writing -------------------------------------------------------------

    def plan(self, nbytes: int, frames: int) -> int:
        """Where the next ``nbytes`` go (then ``write`` them there)."""
        with self._mutex:
            if self._planned >= self.segment_bytes:
                self._active += 1
                self._planned = 0
            start = position(self._active, self._planned)
            self._planned += nbytes
            self._frames[self._active] += frames
            return start

    def append(self, data: bytes, frames: int) -> int:
        """Plan and write ``data`` (``frames`` whole frames) at the head; where it
        went. One append at a time, from its plan until its bytes are written:
        the log's thread appends each batch's frames and compaction's thread
        copies live frames, and a write planned after one still being written
        could land first; a process killed in the unfinished one then left torn
        bytes with good frames after them (or at the end of a segment before
        the last), which every start and ``syncd verify`` took for damage. So
        whatever a kill cuts short is the history's last bytes, a torn tail
        that a start cuts."""
        with self._appending:
            start = self.plan(len(data), frames)
            self.write(start, data)
            return start

    def write(self, pos: int, data: bytes) -> None:
        number, offset = split(pos)
        fd = self._fd(number, create=True)
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, offset)
            view = view[n:]
            offset += n
        with self._mutex:
            self._sizes[number] = max(self._sizes.get(number, 0), offset)
            self._dirty.add(number)

    def sync(self) -> None:
        """Make what was written durable (before the main log forgets it)."""
        with self._mutex:
            dirty, self._dirty = self._dirty, set()
        for number in sorted(dirty):
            fd = self._fds.get(number)
            if fd is not None:
                os.fsync(fd)
        if dirty:
            fsync_dir(self.directory)

    def probe(self) -> None:
        """Prove that the history's directory takes data again (a page written
        and fsynced, then removed), as the log's probe does for the log's:
        OSError while it does not."""
        path = os.path.join(self.directory, PROBE_NAME)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            done = 0
            while done < len(PROBE_BYTES):  # a short write, then ENOSPC
                done += os.pwrite(fd, PROBE_BYTES[done:], done)
            os.fsync(fd)
        finally:
            os.close(fd)
            remove_probe(self.directory, quiet=True)

    # -- reading ---------------------------------------------------------------

    def read(self, positions: Iterable[int]) -> list[dict[str, Any]]:
        """The records at ``positions``, in that order (checked and decoded)."""
        frames = self.read_raw(list(positions))
        return [frames.decode(i) for i in range(len(frames))]

    def read_raw(self, positions: list[int]) -> RawFrames:
        """The frames at ``positions`` (distinct), in that order, as read:
        neither checked nor decoded (:meth:`RawFrames.decode` does both).
        Frames near each other (one CRDT's ops are mostly written one after
        another) are read in one ``pread`` of the span that holds them
        (:data:`READ_SPAN`, :data:`READ_GAP`): a revert's window of ten
        thousand ops is a few reads, not twenty thousand, and costs next to
        nothing per frame until it is decoded."""
        n = len(positions)
        if all(positions[k] < positions[k + 1] for k in range(n - 1)):
            ordered, order = positions, None
        else:
            order = sorted(range(n), key=positions.__getitem__)
            ordered = [positions[k] for k in order]
        spans: list[bytes] = []
        span_of: list[int] = []
        at: list[int] = []
        i = 0
        while i < n:
            first = ordered[i]
            number = first >> OFFSET_BITS
            prev = first
            j = i + 1
            while j < n:
                pos = ordered[j]
                if pos >> OFFSET_BITS != number or pos - first > READ_SPAN or pos - prev > READ_GAP:
                    break
                prev = pos
                j += 1
            fd = self._fd(number)
            # A frame before the last one ends where a later one starts: the
            # span up to the last header holds them whole; the last one's
            # body is read once its header says how long it is.
            offset = first & _OFFSET_MASK
            span = os.pread(fd, prev - first + HEADER_SIZE, offset)
            if len(span) == prev - first + HEADER_SIZE:
                length = HEADER.unpack_from(span, prev - first)[0] & LENGTH_MASK
                span += os.pread(fd, length, offset + prev - first + HEADER_SIZE)
            span_of.extend(itertools.repeat(len(spans), j - i))
            at.extend([pos - first for pos in ordered[i:j]])
            spans.append(span)
            i = j
        if order is not None:
            back = [0] * n
            for k, original in enumerate(order):
                back[original] = k
            span_of = [span_of[k] for k in back]
            at = [at[k] for k in back]
        return RawFrames(spans, span_of, at, self.directory)

    def read_frames(self, positions: Iterable[int]) -> Iterator[tuple[int, bytes]]:
        """(position, whole frame) for each position, as written."""
        for pos in positions:
            number, offset = split(pos)
            fd = self._fd(number)
            head = os.pread(fd, HEADER_SIZE, offset)
            length = HEADER.unpack(head)[0] & LENGTH_MASK
            yield pos, head + os.pread(fd, length, offset + HEADER_SIZE)

    # -- compaction -----------------------------------------------------------

    def collectable(self, live: Iterable[int]) -> tuple[list[int], list[int]]:
        """Sealed segments to delete outright, and those to copy out first."""
        return self.collectable_by_count(Counter(split(p)[0] for p in live))

    def collectable_by_count(
        self, counts: Counter[int], below: int | None = None
    ) -> tuple[list[int], list[int]]:
        """:meth:`collectable`, from the live positions' count per segment,
        among the segments numbered below ``below`` (default: the active one):
        the segments sealed when ``counts`` was taken, since the frames of
        those sealed later were not counted."""
        empty: list[int] = []
        sparse: list[int] = []
        limit = self._active if below is None else min(below, self._active)
        for number in sorted(self._sizes):
            if number >= limit:
                break
            held = counts.get(number, 0)
            if held == 0:
                empty.append(number)
            elif held <= self._frames.get(number, 0) * MAX_LIVE_SHARE:
                sparse.append(number)
        return empty, sparse

    def delete(self, numbers: Iterable[int]) -> int:
        deleted = 0
        for number in numbers:
            with self._mutex:
                fd = self._fds.pop(number, None)
            if fd is not None:
                os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path(number))
                deleted += 1
            self._sizes.pop(number, None)
            self._frames.pop(number, None)
            self._dirty.discard(number)
        if deleted:
            fsync_dir(self.directory)
        return deleted

    def end(self) -> int:
        """Where the next frame goes (every frame written is before it)."""
        with self._mutex:
            return position(self._active, self._planned)

    def segment_counts(self) -> dict[int, tuple[int, int]]:
        """Segment number -> (bytes, frames) now (for a hint), of the segments
        holding frames: the active one may not exist yet (a file is made by
        its first write), and a hint naming it would be refused as naming a
        segment that is gone."""
        with self._mutex:
            return {n: (size, self._frames.get(n, 0)) for n, size in self._sizes.items() if size}

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sync()
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()

    def files(self) -> list[tuple[str, int]]:
        """Every segment's path and size now (sizes end at frame boundaries when
        asked from the thread that appends)."""
        with self._mutex:
            return [(self._path(n), size) for n, size in sorted(self._sizes.items()) if size]

    @staticmethod
    def check(directory: str) -> tuple[int, int, list[str]]:
        """Read every segment without changing it: ``(files, frames, problems)``.
        A torn tail of the last segment is what a crash leaves (cut at the next
        start), not damage."""
        reader = HistoryFiles(directory)
        numbers = sorted(
            int(m.group(1)) for name in os.listdir(directory) if (m := _NAME_RE.match(name))
        )
        found: list[Scanned] = []
        problems = []
        for i, number in enumerate(numbers):
            damaged: list[tuple[int, int]] = []
            good_end = reader._scan(number, found, 0, damaged)
            size = os.path.getsize(reader._path(number))
            path = reader._path(number)
            problems += [f"{path}: damaged from offset {a} to {b}" for a, b in damaged]
            if good_end != size and i < len(numbers) - 1:
                problems.append(f"{path}: damaged after offset {good_end}")
        return len(numbers), len(found), problems

    @property
    def total_bytes(self) -> int:
        return sum(self._sizes.values())

    @property
    def segment_count(self) -> int:
        return len(self._sizes)

    def _path(self, number: int) -> str:
        return os.path.join(self.directory, f"{number:020d}.hist")

    def _fd(self, number: int, create: bool = False) -> int:
        """Segment ``number``'s descriptor, opened once. Only a write creates a
        segment: a read of one that is gone (a position gone stale) raises
        FileNotFoundError, which callers take as damage, instead of leaving
        an empty segment that a later start would scan."""
        fd = self._fds.get(number)
        if fd is None:
            with self._mutex:
                fd = self._fds.get(number)
                if fd is None:
                    path = self._path(number)
                    flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
                    fd = os.open(path, flags, 0o600)
                    self._fds[number] = fd
        return fd
