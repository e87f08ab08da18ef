"""The hint file: the key directory saved beside the history segments, sorted.

Theory of operation
-------------------
The history files address every CRDT (``history_files.py``). The index over
them (for each CRDT: its type, size, and where each retained op and
checkpoint lies) is the key directory (``keydir.py``). As Bitcask does with
its hint files, the store saves the directory beside the segments, so that a
start reads the directory instead of the data. Unlike Bitcask's, this hint is
not read into memory: it is a table sorted by ``(ns, id)`` in blocks, and a
CRDT's row is read from it when the CRDT is first used. Start-up reads only
the block directory (one key per :data:`BLOCK_ROWS` rows), so it costs a few
milliseconds per 100,000 CRDTs and a CRDT nobody uses costs no memory.

Format (``<data>/history/index.hint``)::

    MAGIC (8 bytes)
    block ...            msgpack [keys, types, codes, sizes, rows]: keys
                         ascending, each "ns NUL id" (see :func:`joined`);
                         the block's distinct types (a type or nil) and per
                         key the index of its type among them (one byte
                         each: a type name per row would be ~8 MB a million),
                         its size and its row (msgpack, bytes)
    directory            msgpack map: header (see :class:`Header`), "first"
                         (each block's first key), "at", "len" and
                         "crc" (each block's offset, length and CRC32, as
                         little-endian arrays)
    trailer (24 bytes)   directory offset (8), directory length (8),
                         CRC32 of the directory (4), END (4)

A row is ``[epoch, from_start, since_checkpoint, checkpoint_due_at, seqs,
ts, pos, cp_seqs, cp_pos, writers, tags]``, the arrays as little-endian
int64 bytes (``seqs``, ``ts``, ``pos``, ``writers`` and ``tags`` one entry
per op; history_index.py). A size is the CRDT's size for the quotas (-1:
not measured; quotas.py). Types and sizes sit beside the rows, so a merge
or a usage scan copies rows without decoding them.

The header says where the history ended when the table was taken (``end``:
a position, every frame before it is in the table), the highest main-log
LSN it holds, each segment's size and frame count up to ``end``, the number
of rows, and each namespace's usage (live CRDTs, bytes, unmeasured).

Lifecycle: a table is written whole, by :class:`TableWriter`, to a temporary
name, fsynced, renamed and the directory fsynced; it is never changed after.
The key directory writes a new one when enough CRDTs changed since the last
(a merge of the old table and what changed), at compaction (which moves
records: the old table is removed first) and at a clean stop. A table stays
valid while the segments it names are there: at open one that is missing,
torn (no trailer, or a CRC that fails), of another version, or that names a
segment that is gone is not used: the directory is rebuilt from the
segments, with a warning.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import struct
import sys
import zlib
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Final

import msgpack

from syncd.store.embedded.log import fsync_dir

log = logging.getLogger("syncd.store")

HINT_NAME: Final = "index.hint"
MAGIC: Final = b"SYNCDHI4"
"""Version 4 is the sorted table; versions 1-3 were the whole index as one
msgpack stream, read into memory. A hint of another version is not used
(the directory is rebuilt from the history files, which hold all of it)."""
END: Final = b"HEND"
_TRAILER: Final = struct.Struct("<QQI4s")

BLOCK_ROWS: Final = 64
"""Rows per block. A lookup reads and decodes one block (about 6 KB for
counters: ~15 us from the page cache), and the directory keeps one key per
block in memory (at a million CRDTs, 15,625 keys: ~2 MB)."""

READ_CHUNK: Final = 1 << 20
"""How much of the table one read takes when it is checked at open."""

Key = tuple[str, str]
Entry = tuple[bytes, "str | None", int]
"""One CRDT as the table holds it: its row (encoded), type and size."""
Block = tuple[list[str], list["str | None"], list[int], list[bytes]]
"""A block decoded: its keys (:func:`joined`), types, sizes and rows."""


def column_bytes(column: array[int]) -> bytes:
    if sys.byteorder == "big":
        column = array("q", column)
        column.byteswap()
    return column.tobytes()


def column(data: bytes) -> array[int]:
    out = array("q")
    out.frombytes(data)
    if sys.byteorder == "big":
        out.byteswap()
    return out


def _uint32s(data: bytes) -> array[int]:
    out = array("I")
    out.frombytes(data)
    if sys.byteorder == "big":
        out.byteswap()
    return out


def _uint32_bytes(values: array[int]) -> bytes:
    if sys.byteorder == "big":
        values = array("I", values)
        values.byteswap()
    return values.tobytes()


@dataclass
class Header:
    """What a table says of itself."""

    end: int
    """History position: every frame before it is in the table."""
    last_lsn: int
    segments: dict[int, tuple[int, int]]
    """Segment number -> (bytes, frames) as of ``end``."""
    rows: int = 0
    usage: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    """Namespace -> (live CRDTs, bytes, unmeasured) over the rows."""

    def encode(self) -> dict[str, Any]:
        return {
            "end": self.end,
            "last_lsn": self.last_lsn,
            "segments": [[n, s, f] for n, (s, f) in sorted(self.segments.items())],
            "rows": self.rows,
            "usage": {ns: list(u) for ns, u in self.usage.items()},
        }

    @classmethod
    def decode(cls, raw: dict[str, Any]) -> Header:
        return cls(
            end=int(raw["end"]),
            last_lsn=int(raw["last_lsn"]),
            segments={int(n): (int(s), int(f)) for n, s, f in raw["segments"]},
            rows=int(raw["rows"]),
            usage={str(ns): (int(u[0]), int(u[1]), int(u[2])) for ns, u in raw["usage"].items()},
        )


def path_in(directory: str) -> str:
    return os.path.join(directory, HINT_NAME)


def joined(key: Key) -> str:
    """A key as the table stores it: ``ns``, NUL, ``id``. Ids and namespaces
    hold no NUL (syncd/ids.py), and NUL sorts first, so these strings sort
    as the (ns, id) pairs do, and a lookup bisects them without building
    tuples."""
    return f"{key[0]}\0{key[1]}"


def split_key(text: str) -> Key:
    ns, _, crdt_id = text.partition("\0")
    return ns, crdt_id


class Table:
    """A table file open for reading (by ``pread``: the reads need no lock,
    and a table whose file was removed stays readable until closed)."""

    def __init__(
        self,
        fd: int,
        header: Header,
        first: list[str],
        at: array[int],
        lengths: array[int],
        crcs: array[int],
    ) -> None:
        self._fd = fd
        self.header = header
        self._first = first
        self._at = at
        self._len = lengths
        self._crc = crcs
        self._recent: tuple[int, Block] | None = None
        """The block read last, decoded: an eviction asks whether a CRDT can be
        read back and then notes its size, two lookups of one key."""

    def __len__(self) -> int:
        return self.header.rows

    @property
    def blocks(self) -> int:
        return len(self._first)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _block(self, i: int) -> Block:
        recent = self._recent
        if recent is not None and recent[0] == i:
            return recent[1]
        data = os.pread(self._fd, self._len[i], self._at[i])
        if len(data) != self._len[i] or zlib.crc32(data) != self._crc[i]:
            raise OSError(f"{HINT_NAME}: block {i} is damaged")
        keys, distinct, codes, sizes, rows = msgpack.unpackb(data, raw=False, use_list=True)
        block = (keys, [distinct[c] for c in codes], sizes, rows)
        self._recent = (i, block)
        return block

    def get(self, key: Key) -> Entry | None:
        """What the table holds of ``key``; None when it has no row of it."""
        text = joined(key)
        i = bisect.bisect_right(self._first, text) - 1
        if i < 0:
            return None
        keys, types, sizes, rows = self._block(i)
        j = bisect.bisect_left(keys, text)
        if j < len(keys) and keys[j] == text:
            return rows[j], types[j], sizes[j]
        return None

    def scan(self, start: Key | None = None) -> Iterator[tuple[Key, Entry]]:
        """Every row from ``start`` on (None: from the first), in key order."""
        for text, entry in self.scan_joined(None if start is None else joined(start)):
            yield split_key(text), entry

    def scan_joined(self, start: str | None = None) -> Iterator[tuple[str, Entry]]:
        """:meth:`scan` with the keys as the table stores them (:func:`joined`)."""
        i = 0 if start is None else max(0, bisect.bisect_right(self._first, start) - 1)
        for b in range(i, len(self._first)):
            keys, types, sizes, rows = self._block(b)
            j = 0 if start is None or b != i else bisect.bisect_left(keys, start)
            for k in range(j, len(keys)):
                yield keys[k], (rows[k], types[k], sizes[k])


def open_table(directory: str, existing: Iterable[int]) -> Table | None:
    """The table, checked block by block; None when there is none or it
    cannot be used (a warning says why; the caller then reads the segments)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path_in(directory) + ".tmp")
    try:
        fd = os.open(path_in(directory), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    try:
        table = _read(fd)
    except (ValueError, OSError) as exc:
        os.close(fd)
        log.warning("history index hint is unusable (%s); reading the history files", exc)
        return None
    missing = set(table.header.segments) - set(existing)
    if missing:
        table.close()
        log.warning(
            "history index hint names segments that are gone (%s); reading the history files",
            ", ".join(str(n) for n in sorted(missing)[:5]),
        )
        return None
    return table


def _read(fd: int) -> Table:
    size = os.fstat(fd).st_size
    if size < len(MAGIC) + _TRAILER.size or os.pread(fd, len(MAGIC), 0) != MAGIC:
        raise ValueError("not a hint file of this version")
    at, length, crc, end = _TRAILER.unpack(os.pread(fd, _TRAILER.size, size - _TRAILER.size))
    if end != END or at + length != size - _TRAILER.size or at < len(MAGIC):
        raise ValueError("no trailer (a torn write)")
    raw = os.pread(fd, length, at)
    if len(raw) != length or zlib.crc32(raw) != crc:
        raise ValueError("checksum mismatch in the directory")
    try:
        d = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        header = Header.decode(d["header"])
        first = d["first"]
        if type(first) is not list or any(type(k) is not str for k in first):
            raise ValueError("first keys of the wrong shape")
        offsets, lengths, crcs = column(d["at"]), column(d["len"]), _uint32s(d["crc"])
    except (KeyError, TypeError, ValueError, msgpack.UnpackException) as exc:
        raise ValueError(f"malformed directory: {exc}") from None
    if not len(first) == len(offsets) == len(lengths) == len(crcs):
        raise ValueError("malformed directory: columns differ in length")
    _check_blocks(fd, offsets, lengths, crcs, at)
    return Table(fd, header, first, offsets, lengths, crcs)


def _check_blocks(
    fd: int, offsets: array[int], lengths: array[int], crcs: array[int], stop: int
) -> None:
    """Every block's CRC, read in order in :data:`READ_CHUNK` pieces (through
    the page cache, not mapped: the check leaves no pages in the process)."""
    expect = len(MAGIC)
    buf = b""
    buf_at = len(MAGIC)
    for i in range(len(offsets)):
        start, n = offsets[i], lengths[i]
        if start != expect:
            raise ValueError("blocks are not contiguous")
        expect = start + n
        if expect > stop:
            raise ValueError("a block runs past the directory")
        if start + n > buf_at + len(buf):
            rest = buf[start - buf_at :]
            more = os.pread(fd, max(READ_CHUNK, n), start + len(rest))
            buf, buf_at = rest + more, start
            if len(buf) < n:
                raise ValueError("a block is cut short")
        view = memoryview(buf)[start - buf_at : start - buf_at + n]
        if zlib.crc32(view) != crcs[i]:
            raise ValueError(f"checksum mismatch in block {i}")
    if expect != stop:
        raise ValueError("bytes between the blocks and the directory")


class TableWriter:
    """Writes a table from rows given in ascending key order."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._tmp = path_in(directory) + ".tmp"
        self._f: BinaryIO = open(self._tmp, "wb")  # noqa: SIM115 (closed by finish/abort)
        os.chmod(self._tmp, 0o600)
        self._f.write(MAGIC)
        self._at = len(MAGIC)
        self._keys: list[str] = []
        self._types: list[str | None] = []
        self._sizes: list[int] = []
        self._rows: list[bytes] = []
        self._first: list[str] = []
        self._offsets = array("q")
        self._lengths = array("q")
        self._crcs = array("I")
        self.rows = 0
        self.usage: dict[str, list[int]] = {}
        self._last: str | None = None
        self._pack = msgpack.Packer(use_bin_type=True).pack

    def add(self, key: Key, row: bytes, type_name: str | None, size: int) -> None:
        """One row (``type_name`` and ``size``: for the namespace's usage)."""
        self.add_joined(joined(key), row, type_name, size)

    def add_joined(self, text: str, row: bytes, type_name: str | None, size: int) -> None:
        """:meth:`add` with the key as the table stores it (:func:`joined`)."""
        if self._last is not None and text <= self._last:
            raise ValueError(f"rows out of order: {text!r} after {self._last!r}")
        self._last = text
        self._keys.append(text)
        self._types.append(type_name)
        self._sizes.append(size)
        self._rows.append(row)
        self.rows += 1
        if type_name is not None:
            ns = text.partition("\0")[0]
            u = self.usage.get(ns)
            if u is None:
                u = self.usage[ns] = [0, 0, 0]
            u[0] += 1
            if size < 0:
                u[2] += 1
            else:
                u[1] += size
        if len(self._rows) == BLOCK_ROWS:
            self._flush_block()

    def _flush_block(self) -> None:
        if not self._rows:
            return
        distinct = list(dict.fromkeys(self._types))
        if len(distinct) > 255:
            raise ValueError("more than 255 types in one block")
        code = {t: i for i, t in enumerate(distinct)}
        codes = bytes(code[t] for t in self._types)
        data = self._pack([self._keys, distinct, codes, self._sizes, self._rows])
        self._first.append(self._keys[0])
        self._offsets.append(self._at)
        self._lengths.append(len(data))
        self._crcs.append(zlib.crc32(data))
        self._f.write(data)
        self._at += len(data)
        self._keys, self._types, self._sizes, self._rows = [], [], [], []

    def finish(self, header: Header) -> int:
        """Write the directory, make it durable and put it in place; the bytes."""
        self._flush_block()
        header.rows = self.rows
        header.usage = {ns: (u[0], u[1], u[2]) for ns, u in self.usage.items()}
        directory = self._pack(
            {
                "header": header.encode(),
                "first": self._first,
                "at": column_bytes(self._offsets),
                "len": column_bytes(self._lengths),
                "crc": _uint32_bytes(self._crcs),
            }
        )
        self._f.write(directory)
        self._f.write(_TRAILER.pack(self._at, len(directory), zlib.crc32(directory), END))
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        os.replace(self._tmp, path_in(self.directory))
        fsync_dir(self.directory)
        return self._at + len(directory) + _TRAILER.size

    def abort(self) -> None:
        self._f.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._tmp)


def remove(directory: str) -> None:
    """Forget the hint (before anything that would make it wrong)."""
    removed = False
    for name in (HINT_NAME, HINT_NAME + ".tmp"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, name))
            removed = True
    if removed:
        fsync_dir(directory)


__all__ = [
    "BLOCK_ROWS",
    "HINT_NAME",
    "Entry",
    "Header",
    "Table",
    "TableWriter",
    "column",
    "column_bytes",
    "joined",
    "open_table",
    "path_in",
    "remove",
    "split_key",
]
