"""Segment files of the append-only log: framing, writing, scanning and repair.

Frame layout (little-endian)::

    [u32 length | flags][u32 crc32][u64 tag][body: one msgpack map]

The CRC covers the length word, the tag and the body. In a segment the tag is
the record's log sequence number (LSN, global, gap-free, never reused once
durable); in a snapshot it names the section (see ``snapshot.py``).

The top bit of the length word (``FLAG_BATCH_START``) marks the first record
of a write batch: one write of whole requests (``commit.py``; one ``append``,
one client request, is one group of records). A crash can tear only the batch
being written (earlier ones were fsynced before it started), and a torn batch
may hold good records *after* a bad one, since pages reach the disk in any
order. So damage in the last segment followed by the start of a *later* batch
is real corruption (refuse to start), while damage inside the last batch is a
torn write (cut it). Damage in a final batch that had been acknowledged cannot
be told from a torn write and is cut too.

A request is applied whole or not at all, and none is answered before its
batch is durable, so a torn request is cut whole: every record of a request
but its last carries a mark saying more of its request follows, and a scan
that ends (damage, runway zeros, the file's end) right after a marked record
cuts back to that request's first record: the one after the last unmarked
record, or the batch's first record, whichever is later (a request never
spans two batches, and a batch never spans two segments: ``LogWriter.write``
rotates only between batches, so a cut never reaches into an earlier
segment). The whole requests before it in the torn batch are kept: none was
answered, but each is whole, and a retry with its ``op_id`` finds it, as it
finds any request made durable just before a crash. After an unmarked record
the damage is the next request's first record: the cut is there.

The mark is in the body, not the length word: the body's msgpack map header
is written in its 32-bit form (``MARK_MORE``, see ``mark_more``). Every
msgpack decoder, earlier versions of syncd included, reads that as the same
map, so an earlier version reads a log written by this one record for record
(a new bit in the length word would be damage to it: it would cut the log
there). Segments written before the mark existed have no marked record:
their damage is cut at the bad record, as it was then.

While syncing, the file of the active segment runs ahead of its last record
with zeros (``RUNWAY_BYTES``): a scan ends cleanly where only zeros are left,
since no frame starts with a zero length word.

Segments are named by the LSN of their first record, zero-padded to 20 digits,
so names sort by LSN. Nothing a client chose ever becomes part of a file name.

``LogFile`` is the only way this package writes a file, so tests can swap in a
subclass that fails with ENOSPC, EIO or EACCES at will. ``LogWriter`` owns the
active end of the log and is used from one I/O thread only.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import mmap
import os
import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack

from syncd.store.base import Record

log = logging.getLogger("syncd.store")

HEADER = struct.Struct("<IIQ")
HEADER_SIZE = HEADER.size
WORD_TAG = struct.Struct("<IQ")
"""The header's word and tag, as the CRC covers them (with the body)."""
FLAG_BATCH_START = 1 << 31
LENGTH_MASK = FLAG_BATCH_START - 1

MARK_MORE = 0xDF
"""The first byte of a record's body when more records of its request follow
it: msgpack's 32-bit map header (then the entry count, 4 bytes big-endian),
which ``mark_more`` puts in place of the shorter header the packer wrote. The
mark is in the body, not in the length word, for compatibility: every msgpack
decoder, earlier versions of syncd included, decodes it to the same map, so
they read a log written by this version unchanged, whereas a new bit in the
length word would be damage to them, and they would cut the log there. A
record has far fewer than 65,536 keys, so msgpack never writes this header
for one on its own: a body that starts with it was marked."""

# msgpack's map headers: a fixmap's one byte holds up to 15 entries, a map16's
# three bytes up to 65,535, a map32's five bytes (the mark) any count.
_MAP32 = struct.Struct(">BI")
_FIXMAP_FIRST, _FIXMAP_LAST = 0x80, 0x8F
_MAP16 = 0xDE
_MAP16_HEADER = 3

MAX_RECORD_BYTES = 64 * 1024 * 1024
"""An op record is bounded by the request body limit (1 MiB by default) plus what
the engine adds to it; a longer length word in a segment is damage, not data."""

SEGMENT_BYTES = 16 * 1024 * 1024
"""Rotation size: rotating costs a file create and a directory fsync, so not too
small; compaction deletes whole segments and start-up checks (without decoding)
the covered part of the segment holding the snapshot's LSN, so not too large."""

RUNWAY_BYTES = 1024 * 1024
"""Zeros kept written ahead of the log's end while syncing. A durable write
that extends a file must also commit its new size and blocks (a file-system
journal commit); one into blocks already written needs neither, and costs
half as much here (RWF_DSYNC of a 2.7 KB batch: 146-173 us p50 instead of
285-332, and half the system CPU). The zeros go out with the next durable
write, once per runway, instead of a journal commit with every commit."""

_ZEROS = bytes(RUNWAY_BYTES)

PROBE_BYTES = b"\0" * 4096
"""One page: a probe smaller than a page could fit in a nearly full disk that a
real batch would not."""

SEGMENT_SUFFIX = ".seg"
PROBE_NAME = ".probe"

STARTING = "starting"
"""What a reader of the log is doing (``check_segment``'s ``doing``): the
start-up's read, which refuses to start on damage."""
RUNNING = "running"
"""A read while the store runs (a reload after a failure, the history read
back from the log): the store goes on refusing writes on damage."""
VERIFYING = "verifying"
"""``syncd verify``'s read-only check: damage is reported, nothing refused."""
_SEGMENT_RE = re.compile(r"^(\d{20})\.seg$")

Opener = Callable[[str], "LogFile"]

_dsync_flag: int = getattr(os, "RWF_DSYNC", 0)
"""``pwritev``'s flag for a durable write, or 0 once the kernel has refused it."""


class StoreCorruptError(Exception):
    """The data on disk is damaged where a crash cannot have damaged it."""


def frame(tag: int, body: bytes, flags: int = 0) -> bytes:
    """One frame: header and body."""
    word = len(body) | flags
    crc = zlib.crc32(body, zlib.crc32(WORD_TAG.pack(word, tag)))
    return HEADER.pack(word, crc, tag) + body


def mark_more(body: bytes) -> bytes:
    """``body`` (a packed map) with its header in the 32-bit form (``MARK_MORE``):
    the same map to any decoder, marked as not its request's last record."""
    first = body[0]
    if _FIXMAP_FIRST <= first <= _FIXMAP_LAST:
        return _MAP32.pack(MARK_MORE, first & 0x0F) + body[1:]
    if first == _MAP16:
        count = int.from_bytes(body[1:_MAP16_HEADER], "big")
        return _MAP32.pack(MARK_MORE, count) + body[_MAP16_HEADER:]
    raise ValueError(f"not a packed map of under 65,536 entries (first byte {first:#04x})")


def frame_crc_ok(data: memoryview, off: int, end: int, crc: int) -> bool:
    """Whether the frame at ``off`` (ending at ``end``) matches ``crc``."""
    return zlib.crc32(data[off + 8 : end], zlib.crc32(data[off : off + 4])) == crc


def decode_map(body: memoryview | bytes) -> dict[str, Any] | None:
    """A msgpack map, or None when the bytes are not exactly one map."""
    try:
        # unpackb bounds every container and string by the input length.
        value = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception:  # any decoding failure of damaged bytes means "not a record"
        return None
    return value if isinstance(value, dict) else None


def segment_name(first_lsn: int) -> str:
    return f"{first_lsn:020d}{SEGMENT_SUFFIX}"


def list_segments(log_dir: str) -> list[tuple[int, str]]:
    """``(first_lsn, path)`` of every segment, ascending."""
    found = []
    for name in os.listdir(log_dir):
        m = _SEGMENT_RE.match(name)
        if m:
            found.append((int(m.group(1)), os.path.join(log_dir, name)))
    found.sort()
    return found


def fsync_dir(path: str) -> None:
    """Make a directory's entries (a created, renamed or deleted file) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, path: str, view: memoryview, offset: int, flags: int = 0) -> None:
    """All of ``view`` at ``offset``: a write may take fewer bytes than asked."""
    while view:
        n = os.pwritev(fd, [view], offset, flags) if flags else os.pwrite(fd, view, offset)
        if n <= 0:  # pwrite reports a full disk as an error; be safe anyway
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        view = view[n:]
        offset += n


class LogFile:
    """A file opened for writing at explicit offsets. Subclass to inject faults."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def open(cls, path: str) -> LogFile:
        """Open (creating if missing, never truncating) for reading and writing."""
        return cls(path, os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))

    def write_at(self, data: bytes | memoryview, offset: int) -> None:
        _write_all(self._fd, self.path, memoryview(data), offset)

    def write_durable(self, data: bytes | memoryview, offset: int) -> None:
        """``write_at`` and ``fsync`` as one system call (RWF_DSYNC, the per-write
        O_DSYNC) where the kernel has it: the I/O thread then gives up and takes
        back the GIL once per group commit instead of twice."""
        global _dsync_flag
        if _dsync_flag:
            try:
                _write_all(self._fd, self.path, memoryview(data), offset, _dsync_flag)
                return
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                _dsync_flag = 0  # this kernel or file system refuses the flag
        self.write_at(data, offset)
        self.fsync()

    def zero_fill(self, start: int, end: int) -> None:
        """Write zeros over ``[start, end)`` (the runway; not a fault point for
        tests: a failure here only costs the runway)."""
        zeros = memoryview(_ZEROS)
        for at in range(start, end, len(zeros)):
            _write_all(self._fd, self.path, zeros[: min(len(zeros), end - at)], at)

    def fsync(self) -> None:
        os.fsync(self._fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)


@dataclass
class SegmentScan:
    """What one segment held."""

    next_lsn: int
    """The LSN after its last good record."""
    good_end: int
    """The offset after its last good record."""
    size: int
    """The bytes examined."""
    new_bytes: int
    """Bytes of records with an LSN above ``skip_upto``."""


@dataclass(frozen=True, slots=True)
class RecordChunk:
    """Consecutive checked records of one segment, still encoded."""

    path: str
    offset: int
    """File offset of the first record's frame."""
    first_lsn: int
    count: int
    data: mmap.mmap
    """One msgpack array holding the records' bodies, so that one call decodes them all."""
    doing: str = STARTING
    """What the reader that checked it is doing (:func:`refusal`)."""


CHUNK_BYTES = 128 * 1024
"""Record bodies per chunk: one decoding call per chunk makes the per-call cost
vanish, and a chunk's decoded maps (several times its bytes) are replayed while
they are still in the CPU caches."""

_ARRAY32 = struct.Struct(">BI")
_ARRAY32_TYPE = 0xDD


def remove_probe(directory: str, *, quiet: bool = False) -> None:
    """Remove ``directory``'s probe file (:data:`PROBE_NAME`) if there is one:
    after a failed probe, and at start-up (one a process killed between a
    probe's write and its removal left). One that cannot be removed is left
    (the next probe truncates it; nothing else reads it), with a warning
    unless ``quiet`` (a failing disk's probes, every probe interval): it must
    not stop a start."""
    try:
        os.unlink(os.path.join(directory, PROBE_NAME))
    except FileNotFoundError:
        pass
    except OSError as exc:
        if not quiet:
            log.warning("%s: cannot remove the probe file (%s); left in place", directory, exc)


def refusal(doing: str, advice: str) -> str:
    """What damage found in the log means to the reader ``doing`` it
    (:data:`STARTING`, :data:`RUNNING`, :data:`VERIFYING`), with ``advice``:
    a running store that says "refusing to start" misleads whoever reads its
    log into thinking it stopped."""
    if doing == RUNNING:
        return f"the store cannot read its log back and goes on refusing writes (stop syncd, then {advice})"
    if doing == VERIFYING:
        return advice
    return f"refusing to start ({advice})"


def check_segment(
    path: str,
    expected: int,
    skip_upto: int,
    out: list[RecordChunk],
    *,
    limit: int | None,
    tolerate_tail: bool,
    chunk_bytes: int = CHUNK_BYTES,
    doing: str = STARTING,
) -> SegmentScan:
    """Check every frame of a segment whose first record should be ``expected``;
    append the records above ``skip_upto`` to ``out`` as encoded chunks
    (``decode_chunk`` turns one into records).

    ``limit`` reads only that many bytes (the durable part of a file still being
    written). With ``tolerate_tail`` a torn tail is cut (with a warning naming
    the bytes cut): at the bad record, or, when the last good record is marked
    (``MARK_MORE``: its request goes on past the tear), at its request's first
    record, so that ``good_end`` and ``next_lsn`` are that record's and none of
    the torn request's records is left in ``out``; the whole requests before it
    are kept. Otherwise, and for damage followed by a later batch, the scan
    raises ``StoreCorruptError`` naming the file and offset; so does a segment
    whose last record is marked (it ends inside a request). ``doing``: what
    the caller is doing (:func:`refusal`), for what the error says it means.
    """
    with open(path, "rb") as f:
        data = f.read() if limit is None else f.read(limit)
    if limit is not None and len(data) < limit:
        raise StoreCorruptError(
            f"{path}: {len(data)} bytes on disk, but {limit} bytes were made durable"
        )
    mv = memoryview(data)
    n = len(data)
    # Past the last nonzero byte there is no frame: a runway's zeros, or the
    # unwritten rest of a torn batch (never acknowledged: its write did not
    # complete). rstrip copies only when there are zeros to strip.
    data_end = len(data.rstrip(b"\0"))
    off = 0
    unpack = HEADER.unpack_from
    crc32 = zlib.crc32
    # The CRC of each length word seen (a log has few distinct record lengths);
    # only words of a possible length get in, so being here vouches for that.
    word_crcs: dict[int, int] = {}
    # The bodies of the chunk being gathered, after a slot for its array header.
    parts: list[bytes | memoryview] = [b""]
    chunk_offset = skipped_end = 0
    last = -1  # the offset of the last good record: is its request torn?
    bad = ""
    while off < n:
        # The common case, a whole record in sequence, on as few steps as can be;
        # anything else goes to _frame_fault, which tells what is wrong, if anything.
        if n - off >= HEADER_SIZE:
            word, crc, lsn = unpack(mv, off)
            end = off + HEADER_SIZE + (word & LENGTH_MASK)
            word_crc = word_crcs.get(word)
            if (
                word_crc is not None
                and end <= n
                and lsn == expected
                and crc32(mv[off + 8 : end], word_crc) == crc
            ):
                if lsn > skip_upto:
                    parts.append(mv[off + HEADER_SIZE : end])
                    if end - chunk_offset >= chunk_bytes:
                        out.append(_chunk(path, chunk_offset, lsn, parts, doing))
                        parts = [b""]
                        chunk_offset = end
                else:
                    chunk_offset = skipped_end = end
                expected += 1
                last = off
                off = end
                continue
        if off >= data_end:
            break  # the clean end of a file written with a runway
        bad = _frame_fault(mv, off, expected, word_crcs)
        if not bad:
            continue  # a good record of a length not seen before
        if not tolerate_tail or _later_batch_starts(mv, off + 1, expected, data_end):
            raise StoreCorruptError(
                f"{path}: {bad} at offset {off}, before data that was made durable "
                f"after it; "
                + refusal(
                    doing,
                    "restore the file from a backup, or move it away to give up "
                    f"the records from offset {off} on",
                )
            )
        break
    good_end = off
    if last >= 0 and mv[last + HEADER_SIZE] == MARK_MORE:
        # The last good record is not its request's last: that request is torn
        # (damage at ``off``, or nothing but zeros or the file's end after it).
        if not tolerate_tail:
            raise StoreCorruptError(
                f"{path}: the segment ends at offset {off} inside a request (its last "
                "record says more follow); " + refusal(doing, "restore the file from a backup")
            )
        bad = bad or "a request without its last record"
        good_end, request_lsn = _request_start(mv, last)
        parts = _drop_from(out, parts, path, mv, request_lsn, good_end, expected)
        expected = request_lsn
    if bad:
        log.warning(
            "%s: %s at offset %d (a torn or damaged tail): cutting %d bytes from offset %d, "
            "keeping the log up to sequence %d",
            path,
            bad,
            off,
            n - good_end,
            good_end,
            expected - 1,
        )
    if len(parts) > 1:
        out.append(_chunk(path, chunk_offset, expected - 1, parts, doing))
    # The records above skip_upto follow those at or below it (a cut may reach
    # below them only in a request a snapshot covers: damaged after it was durable).
    return SegmentScan(expected, good_end, n, max(good_end - skipped_end, 0))


def _request_start(mv: memoryview, last: int) -> tuple[int, int]:
    """The offset and LSN of the first record of the request that the record at
    ``last`` is in (every frame up to it was checked): the record after the
    last one before it that ends its request (unmarked), or its batch's first
    record, whichever is later. A request never spans two batches, and a batch
    never spans two segments, so one opens at offset 0 at the latest."""
    unpack = HEADER.unpack_from
    off = found = 0
    lsn = unpack(mv, 0)[2]
    while off <= last:
        word, _, tag = unpack(mv, off)
        if word & FLAG_BATCH_START:
            found, lsn = off, tag
        body = off + HEADER_SIZE
        off = body + (word & LENGTH_MASK)
        if mv[body] != MARK_MORE:  # it ends its request: the next record opens one
            found, lsn = off, tag + 1
    return found, lsn


def _drop_from(
    out: list[RecordChunk],
    parts: list[bytes | memoryview],
    path: str,
    mv: memoryview,
    lsn: int,
    offset: int,
    next_lsn: int,
) -> list[bytes | memoryview]:
    """Take the records from LSN ``lsn`` on (at ``offset``) out of what a scan
    gathered: the chunk being gathered (``parts``, whose last record is
    ``next_lsn - 1``) and the chunks already in ``out``; the parts left."""
    kept = len(parts) - 1 - (next_lsn - lsn)
    if kept >= 0:
        del parts[1 + kept :]
        return parts
    while out and out[-1].first_lsn >= lsn:
        out.pop()
    if out and out[-1].first_lsn + out[-1].count > lsn:
        last = out[-1]
        out[-1] = _chunk_of_frames(path, mv, last.offset, offset, last.first_lsn)
    return [b""]


def _chunk_of_frames(
    path: str, mv: memoryview, start: int, stop: int, first_lsn: int
) -> RecordChunk:
    """The chunk of the (checked) records from offset ``start`` to ``stop``."""
    parts: list[bytes | memoryview] = [b""]
    off = start
    while off < stop:
        end = off + HEADER_SIZE + (HEADER.unpack_from(mv, off)[0] & LENGTH_MASK)
        parts.append(mv[off + HEADER_SIZE : end])
        off = end
    return _chunk(path, start, first_lsn + len(parts) - 2, parts)


def _frame_fault(mv: memoryview, off: int, expected: int, word_crcs: dict[int, int]) -> str:
    """What is wrong with the frame at ``off``, or "" if nothing is (its length
    word's CRC is then in ``word_crcs``)."""
    n = len(mv)
    if n - off < HEADER_SIZE:
        return "short frame header"
    word, crc, lsn = HEADER.unpack_from(mv, off)
    length = word & LENGTH_MASK
    end = off + HEADER_SIZE + length
    if length == 0 or length > MAX_RECORD_BYTES:
        return f"impossible record length {length}"
    if end > n:
        return "short record"
    word_crc = word_crcs[word] = zlib.crc32(mv[off : off + 4])
    if zlib.crc32(mv[off + 8 : end], word_crc) != crc:
        return "checksum mismatch"
    if lsn != expected:
        return f"log sequence {lsn} where {expected} was due"
    return ""


def _chunk(
    path: str, offset: int, last_lsn: int, parts: list[bytes | memoryview], doing: str = STARTING
) -> RecordChunk:
    """The chunk of the bodies in ``parts[1:]`` (``parts[0]`` is a free slot)."""
    count = len(parts) - 1
    parts[0] = _ARRAY32.pack(_ARRAY32_TYPE, count)
    joined = b"".join(parts)
    # A mapping of its own goes back to the system when the chunk is dropped; from
    # the malloc heap (where glibc puts blocks this size once a segment's larger
    # buffer was freed) a long log's chunks would stay in the RSS after replay.
    data = mmap.mmap(-1, len(joined))
    data[:] = joined
    return RecordChunk(path, offset, last_lsn - count + 1, count, data, doing)


def decode_chunk(chunk: RecordChunk) -> list[Record]:
    """The records of a chunk; ``StoreCorruptError`` naming file and offset if one
    does not decode to a map (its frame was checked, so only a writer bug, not a
    crash, can cause that)."""
    try:
        # unpackb bounds every container and string by the input length.
        records = msgpack.unpackb(chunk.data, strict_map_key=False)
    except Exception:  # any decoding failure of damaged bytes means "not records"
        records = None
    # A body holding more or less than one object would shift the count.
    if type(records) is list and len(records) == chunk.count and set(map(type, records)) == {dict}:
        return records
    raise _undecodable(chunk)


def _undecodable(chunk: RecordChunk) -> StoreCorruptError:
    """Find the first record of a chunk that is not one map, to name its offset."""
    at = f"in the {chunk.count} records from offset {chunk.offset}"
    with contextlib.suppress(OSError):
        with open(chunk.path, "rb") as f:
            f.seek(chunk.offset)
            data = f.read()
        off = 0
        for _ in range(chunk.count):
            if len(data) - off < HEADER_SIZE:
                break
            end = off + HEADER_SIZE + (HEADER.unpack_from(data, off)[0] & LENGTH_MASK)
            if decode_map(data[off + HEADER_SIZE : end]) is None:
                at = f"at offset {chunk.offset + off}"
                break
            off = end
    return StoreCorruptError(
        f"{chunk.path}: undecodable record {at}, though its checksum is right; "
        + refusal(chunk.doing, "restore the file from a backup")
    )


def scan_segment(
    path: str,
    expected: int,
    skip_upto: int,
    out: list[tuple[int, Record]],
    *,
    limit: int | None,
    tolerate_tail: bool,
) -> SegmentScan:
    """``check_segment``, then decode the records above ``skip_upto`` into ``out``
    as ``(lsn, record)``: for tools and tests that want the records at once."""
    chunks: list[RecordChunk] = []
    scan = check_segment(
        path, expected, skip_upto, chunks, limit=limit, tolerate_tail=tolerate_tail
    )
    for chunk in chunks:
        out.extend(enumerate(decode_chunk(chunk), chunk.first_lsn))
    return scan


def _later_batch_starts(mv: memoryview, start: int, expected: int, data_end: int) -> bool:
    """Whether a good frame opening a write batch (LSN >= ``expected``) lies at or
    after ``start`` (and before ``data_end``, where only zeros follow): if so, the
    damage before it is not a torn last batch."""
    n = len(mv)
    unpack = HEADER.unpack_from
    for p in range(start, min(n - HEADER_SIZE + 1, data_end)):
        if mv[p + 3] < 0x80:  # the batch-start flag is the top bit of the length word
            continue
        word, crc, lsn = unpack(mv, p)
        length = word & LENGTH_MASK
        end = p + HEADER_SIZE + length
        if (
            0 < length <= MAX_RECORD_BYTES
            and end <= n
            and expected <= lsn < expected + n
            and frame_crc_ok(mv, p, end, crc)
        ):
            return True
    return False


class LogWriter:
    """The active end of the log. Every method runs in the store's single I/O thread.

    After a failed write or fsync the file's content past the last good offset is
    unknown (and on Linux a retried fsync may report success for lost pages), so
    the file is set aside as *broken*: ``repair`` cuts it back to its good offset
    and continues in a fresh segment.
    """

    def __init__(
        self,
        log_dir: str,
        opener: Opener,
        segment_bytes: int,
        segments: list[tuple[int, str]],
        runway: bool = True,
    ) -> None:
        self.log_dir = log_dir
        self.runway_enabled = runway
        """Whether to keep a runway at all (see RUNWAY_BYTES); on unless measuring."""
        self.opener = opener
        self.segment_bytes = segment_bytes
        self.segments = segments
        self.active: LogFile | None = None
        self.active_size = 0
        self.zeroed_end = 0
        """The active file's bytes written so far, records and runway zeros."""
        self.runway = runway
        """For the active file: False once zeros did not fit (a nearly full disk)."""
        self.broken: tuple[str, int] | None = None
        self.fsyncs = 0

    def write(self, data: bytes, first_lsn: int, sync: bool) -> None:
        """Append one batch (whose first record has LSN ``first_lsn``)."""
        if self.active is None:
            raise OSError(errno.EIO, "the log has not been repaired since a failure")
        try:
            # Rotate before a batch, never inside one: a batch, and so each of
            # its requests, lies in one segment (which may end up to a batch
            # past segment_bytes), so a torn request is cut within the last
            # segment alone.
            if self.active_size >= self.segment_bytes:
                self._rotate(first_lsn)
            active = self.active
            if sync:
                end = self.active_size + len(data)
                if end > self.zeroed_end and self.runway:
                    self._extend_runway(active, end + RUNWAY_BYTES)
                active.write_durable(data, self.active_size)
                self.fsyncs += 1
            else:
                active.write_at(data, self.active_size)
        except OSError:
            self._break()
            raise
        self.active_size += len(data)

    def _extend_runway(self, active: LogFile, end: int) -> None:
        """Zeros up to ``end``: committed by the durable write that follows, after
        which writes inside them need no journal commit (see RUNWAY_BYTES). Best
        effort: without room for the zeros, the batch extends the file itself."""
        # Never below the records: after a runway failed, zeroed_end lags them.
        start = max(self.zeroed_end, self.active_size)
        try:
            active.zero_fill(start, end)
        except OSError as exc:
            log.debug("no runway for %s: %s", active.path, exc)
            with contextlib.suppress(OSError):
                active.truncate(start)
            self.runway = False  # not again in this file: it would fail each commit
            return
        self.zeroed_end = end

    def active_file(self) -> tuple[str, int] | None:
        """The segment being appended to and its size in records (no runway)."""
        if self.active is None:
            return None
        return self.active.path, self.active_size

    def sync(self) -> None:
        if self.active is not None:
            try:
                self.active.fsync()
            except OSError:
                self._break()
                raise
            self.fsyncs += 1

    def repair(self, next_lsn: int) -> None:
        """Cut a broken file back to its good offset, open a fresh segment starting
        at ``next_lsn`` and prove with a probe write+fsync that the disk takes data.
        Idempotent: a repair that fails part-way is simply tried again."""
        if self.broken is not None:
            path, good = self.broken
            f = self.opener(path)
            try:
                f.truncate(good)
                f.fsync()
            finally:
                f.close()
            if good == 0:
                # It would have the name of the fresh segment: reuse the name.
                os.unlink(path)
                self.segments = [s for s in self.segments if s[1] != path]
                fsync_dir(self.log_dir)
            self.broken = None
        if self.active is None:
            path = os.path.join(self.log_dir, segment_name(next_lsn))
            f = self.opener(path)
            try:
                f.truncate(0)  # a leftover under a name no durable record uses
                fsync_dir(self.log_dir)
            except OSError:
                f.close()
                raise
            if not self.segments or self.segments[-1][1] != path:
                self.segments.append((next_lsn, path))
            self.active = f
            self.active_size = self.zeroed_end = 0
            self.runway = self.runway_enabled
        self.probe()

    def probe(self) -> None:
        """Prove that the log's directory takes data (a page written and
        fsynced); the file is removed whether or not it did: a failed probe
        (a full disk, the usual case) left a page behind at every try."""
        path = os.path.join(self.log_dir, PROBE_NAME)
        f = self.opener(path)
        try:
            try:
                f.write_at(PROBE_BYTES, 0)
                f.fsync()
            finally:
                f.close()
        except BaseException:
            remove_probe(self.log_dir, quiet=True)  # the caller hears of the failure
            raise
        os.unlink(path)  # a disk that cannot remove it does not take data yet either

    def delete_covered(self, covered: int) -> int:
        """Delete the segments whose every record has LSN <= ``covered``; the count."""
        keep: list[tuple[int, str]] = []
        deleted = 0
        in_use = {self.active.path if self.active else "", self.broken[0] if self.broken else ""}
        for i, (first, path) in enumerate(self.segments):
            later = self.segments[i + 1][0] if i + 1 < len(self.segments) else None
            if later is not None and later <= covered + 1 and path not in in_use:
                try:
                    os.unlink(path)
                    deleted += 1
                    continue
                except FileNotFoundError:
                    deleted += 1
                    continue
                except OSError as exc:
                    log.warning("could not delete compacted segment %s: %s", path, exc)
            keep.append((first, path))
        self.segments = keep
        if deleted:
            fsync_dir(self.log_dir)
        return deleted

    def limits(self) -> dict[str, int]:
        """Files still being written, with their durable size (for re-reading)."""
        out = {}
        if self.active is not None:
            out[self.active.path] = self.active_size
        if self.broken is not None:
            out[self.broken[0]] = self.broken[1]
        return out

    def close(self) -> None:
        if self.active is not None:
            if self.zeroed_end > self.active_size:
                # A closed log ends at its last record (a crash leaves the
                # runway, which a scan stops at anyway).
                with contextlib.suppress(OSError):
                    self.active.truncate(self.active_size)
            self.active.close()
            self.active = None

    def _rotate(self, first_lsn: int) -> None:
        path = os.path.join(self.log_dir, segment_name(first_lsn))
        new = self.opener(path)
        old, old_size = self.active, self.active_size
        self.active, self.active_size, self.zeroed_end = new, 0, 0
        self.runway = self.runway_enabled
        self.segments.append((first_lsn, path))
        if old is not None:
            # The runway's zeros are of no use in a full segment (a scan would
            # stop at them anyway; this only gives the space back).
            with contextlib.suppress(OSError):
                old.truncate(old_size)
            try:
                old.close()
            except OSError as exc:  # its data was fsynced with its last batch
                log.warning("closing segment %s: %s", old.path, exc)
        fsync_dir(self.log_dir)

    def _break(self) -> None:
        active = self.active
        if active is not None:
            # Cut the failed bytes at once, so a crash before the repair cannot
            # bring back records that were answered 503; repair cuts again anyway.
            with contextlib.suppress(OSError):
                active.truncate(self.active_size)
                active.fsync()
            with contextlib.suppress(OSError):
                active.close()
            self.broken = (active.path, self.active_size)
            self.active = None
