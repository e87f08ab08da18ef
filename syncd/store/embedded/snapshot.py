"""Snapshot files: every CRDT's entry map as of one log sequence number.

A snapshot is a sequence of frames (the log's framing, ``log.frame``) whose tag
names the section::

    META  {"format": "syncd-snapshot", "version": 1, "lsn": covered}
    ENTRY entry map                      (one per CRDT, opaque here)
    TAIL  op record                      (the replay tail as of ``lsn``)
    END   {"entries": n, "tail": m}

It is written to a temporary name, fsynced, renamed to ``snapshot-<lsn>.snap``
and the directory fsynced, so a snapshot file either is whole or does not
exist. Reading checks every frame, the order of sections, the counts, and that
nothing follows END; any flaw makes the whole file invalid.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from syncd.store.base import Record
from syncd.store.embedded.log import (
    HEADER,
    HEADER_SIZE,
    LENGTH_MASK,
    LogFile,
    Opener,
    StoreCorruptError,
    decode_map,
    frame,
    frame_crc_ok,
    fsync_dir,
)

TAG_META, TAG_ENTRY, TAG_TAIL, TAG_END = 0, 1, 2, 3
FORMAT = "syncd-snapshot"
VERSION = 1

WRITE_CHUNK_BYTES = 1024 * 1024
"""Frames are gathered into writes of about this size: few system calls, bounded
memory beyond the entries themselves."""

SUFFIX = ".snap"
TMP_SUFFIX = ".tmp"
_NAME_RE = re.compile(r"^snapshot-(\d{20})\.snap$")


def snapshot_path(snap_dir: str, lsn: int) -> str:
    return os.path.join(snap_dir, f"snapshot-{lsn:020d}{SUFFIX}")


def list_snapshots(snap_dir: str) -> list[tuple[int, str]]:
    """``(lsn, path)`` of every published snapshot, newest first."""
    found = []
    for name in os.listdir(snap_dir):
        m = _NAME_RE.match(name)
        if m:
            found.append((int(m.group(1)), os.path.join(snap_dir, name)))
    found.sort(reverse=True)
    return found


def remove_temporaries(snap_dir: str) -> None:
    """Delete snapshots that were being written when the process stopped."""
    for name in os.listdir(snap_dir):
        if name.endswith(TMP_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(snap_dir, name))


def delete_older(snap_dir: str, lsn: int) -> None:
    """Delete the snapshots older than the one published for ``lsn``."""
    for old, path in list_snapshots(snap_dir):
        if old < lsn:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


@dataclass
class Snapshot:
    lsn: int
    entries: list[dict[str, Any]] = field(default_factory=list)
    tail: list[Record] = field(default_factory=list)
    size: int = 0


def read_snapshot(path: str, lsn: int) -> Snapshot:
    """Load and check a snapshot published for ``lsn``."""
    with open(path, "rb") as f:
        data = f.read()
    mv = memoryview(data)
    n = len(data)
    snap = Snapshot(lsn, size=n)
    off = 0
    section = TAG_META

    def corrupt(what: str, at: int) -> StoreCorruptError:
        return StoreCorruptError(f"{path}: {what} at offset {at}")

    while True:
        if n - off < HEADER_SIZE:
            raise corrupt("snapshot ends before its END frame", off)
        word, crc, tag = HEADER.unpack_from(mv, off)
        end = off + HEADER_SIZE + (word & LENGTH_MASK)
        if word & ~LENGTH_MASK or end > n or not frame_crc_ok(mv, off, end, crc):
            raise corrupt("damaged frame", off)
        body = decode_map(mv[off + HEADER_SIZE : end])
        if body is None:
            raise corrupt("undecodable frame", off)
        if tag < section or tag > TAG_END or (section == TAG_META and tag != TAG_META):
            raise corrupt(f"frame of section {tag} out of order", off)
        if tag == TAG_META:
            if section != TAG_META or body != {"format": FORMAT, "version": VERSION, "lsn": lsn}:
                raise corrupt(f"unexpected header {body!r}", off)
            section = TAG_ENTRY
        elif tag == TAG_ENTRY:
            snap.entries.append(body)
        elif tag == TAG_TAIL:
            section = TAG_TAIL
            snap.tail.append(body)
        else:
            if body != {"entries": len(snap.entries), "tail": len(snap.tail)}:
                raise corrupt(f"counts {body!r} do not match the frames read", off)
            if end != n:
                raise corrupt("data after the END frame", end)
            return snap
        off = end


class SnapshotWriter:
    """Writes one snapshot in two steps: the entries as soon as they are taken,
    the replay tail and the publication once the covered records are durable.
    Runs in a worker thread; every file goes through ``opener``."""

    def __init__(self, snap_dir: str, lsn: int, opener: Opener) -> None:
        self.snap_dir = snap_dir
        self.lsn = lsn
        self.path = snapshot_path(snap_dir, lsn)
        self.tmp_path = self.path + TMP_SUFFIX
        self._opener = opener
        self._file: LogFile | None = None
        self._offset = 0
        self._buf: list[bytes] = []
        self._buffered = 0
        self._entries = 0
        self._tail = 0
        self._packer = msgpack.Packer(use_bin_type=True)

    def write_entries(self, entries: Iterable[dict[str, Any]]) -> None:
        self._file = self._opener(self.tmp_path)
        self._file.truncate(0)
        self._add(TAG_META, {"format": FORMAT, "version": VERSION, "lsn": self.lsn})
        for entry in entries:
            self._add(TAG_ENTRY, entry)
            self._entries += 1

    def finish(self, tail: Iterable[Record]) -> int:
        """Write the tail and END, make it durable, publish it; its size in bytes."""
        for record in tail:
            self._add(TAG_TAIL, record)
            self._tail += 1
        self._add(TAG_END, {"entries": self._entries, "tail": self._tail})
        self._flush()
        assert self._file is not None
        self._file.fsync()
        self._file.close()
        self._file = None
        os.rename(self.tmp_path, self.path)
        fsync_dir(self.snap_dir)
        return self._offset

    def abort(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
        with contextlib.suppress(OSError):
            os.unlink(self.tmp_path)

    def _add(self, tag: int, value: dict[str, Any]) -> None:
        body = self._packer.pack(value)
        if len(body) > LENGTH_MASK:
            raise ValueError(f"a snapshot entry of {len(body)} bytes is too large")
        self._buf.append(frame(tag, body))
        self._buffered += len(body) + HEADER_SIZE
        if self._buffered >= WRITE_CHUNK_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self._buf:
            return
        data = b"".join(self._buf)
        self._buf.clear()
        self._buffered = 0
        assert self._file is not None
        self._file.write_at(data, self._offset)
        self._offset += len(data)
