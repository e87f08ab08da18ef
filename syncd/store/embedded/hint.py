"""The hint file: the history index saved beside the history segments.

Theory of operation
-------------------
The history files address every CRDT (``history_files.py``); the index over
them (``history.py``: per CRDT life, where each retained op and checkpoint
lies) lives in memory. Rebuilding it means reading every frame of every
segment, so start-up would grow with the history. As Bitcask does with its
hint files, the store saves the index instead, and start-up reads it and
only the frames written after it.

Format (``<data>/history/index.hint``)::

    MAGIC (8 bytes) | msgpack header map | one msgpack array per life ... |
    CRC32 of everything before it (4 bytes, little-endian)

The header says where the history ended when the hint was taken (``end``: a
position, every frame before it is in the hint), the highest main-log LSN it
held (``last_lsn``), and each segment's size and frame count up to ``end``
(``segments``). Each life is ``[ns, id, type, epoch, from_start,
since_checkpoint, checkpoint_due_at, seqs, ts, pos, cp_seqs, cp_pos, size,
writers, tags]``, the arrays as little-endian int64 bytes (``seqs``, ``ts``,
``pos``, ``writers`` and ``tags`` one entry per op), ``size`` the CRDT's
size for the quotas (-1: not measured; catalogue.py), ``writers`` and
``tags`` each op's client id and attribution tag (history.py).

Lifecycle: the store writes a hint when it closes cleanly (in the I/O
thread, from a copy of the index taken on the loop: written to a temporary
name, fsynced, renamed, the directory fsynced). A hint stays valid while
the segments it names are as they were: compaction, which deletes segments
and moves records, removes it first. At open a hint that is missing,
damaged (a torn write fails the CRC) or names a segment that is gone is not
used: the index is rebuilt from the segments, with a warning where one was
there but unusable.
"""

from __future__ import annotations

import contextlib
import logging
import os
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgpack

from syncd.files import write_atomically
from syncd.store.embedded.log import fsync_dir

log = logging.getLogger("syncd.store")

HINT_NAME: Final = "index.hint"
MAGIC: Final = b"SYNCDHI3"
"""Version 2 added each life's size, version 3 each op's writer and tag; a
hint of an earlier version is not used (the index is rebuilt from the
history files, which hold all of it)."""
_TRAILER: Final = 4

ROW_FIELDS: Final = 15
_OP_COLUMNS: Final = (7, 8, 9, 13, 14)
"""The row fields with one int64 per op: seqs, ts, pos, writers, tags."""
LifeRow = list[Any]
"""One life as the hint holds it (see the module docstring)."""


@dataclass
class Hint:
    """What a hint file holds."""

    end: int
    """History position: every frame before it is in the hint."""
    last_lsn: int
    segments: dict[int, tuple[int, int]]
    """Segment number -> (bytes, frames) as of ``end``."""
    lives: list[LifeRow] = field(default_factory=list)


def path_in(directory: str) -> str:
    return os.path.join(directory, HINT_NAME)


def write(directory: str, hint: Hint) -> int:
    """Write ``hint`` atomically; the bytes written."""
    packer = msgpack.Packer(use_bin_type=True)
    header = {
        "end": hint.end,
        "last_lsn": hint.last_lsn,
        "segments": [[n, size, frames] for n, (size, frames) in sorted(hint.segments.items())],
        "lives": len(hint.lives),
    }
    parts = [MAGIC, packer.pack(header)]
    parts.extend(packer.pack(row) for row in hint.lives)
    data = b"".join(parts)
    data += zlib.crc32(data).to_bytes(4, "little")
    write_atomically(Path(path_in(directory)), data, mode=0o600)
    return len(data)


def remove(directory: str) -> None:
    """Forget the hint (before anything that would make it wrong)."""
    removed = False
    for name in (HINT_NAME, HINT_NAME + ".tmp"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, name))
            removed = True
    if removed:
        fsync_dir(directory)


def read(directory: str, existing: Iterable[int]) -> Hint | None:
    """The hint, or None when there is none or it cannot be used (a warning
    says why; the caller then reads the segments)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path_in(directory) + ".tmp")
    try:
        with open(path_in(directory), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    try:
        hint = _decode(data)
    except ValueError as exc:
        log.warning("history index hint is unusable (%s); reading the history files", exc)
        return None
    missing = set(hint.segments) - set(existing)
    if missing:
        log.warning(
            "history index hint names segments that are gone (%s); reading the history files",
            ", ".join(str(n) for n in sorted(missing)[:5]),
        )
        return None
    return hint


def _decode(data: bytes) -> Hint:
    if len(data) < len(MAGIC) + _TRAILER or not data.startswith(MAGIC):
        raise ValueError("not a hint file")
    body, trailer = data[:-_TRAILER], data[-_TRAILER:]
    if zlib.crc32(body) != int.from_bytes(trailer, "little"):
        raise ValueError("checksum mismatch (a torn write)")
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=len(body))
    unpacker.feed(body[len(MAGIC) :])
    try:
        header = next(unpacker)
        lives = list(_rows(unpacker, int(header["lives"])))
        hint = Hint(
            end=int(header["end"]),
            last_lsn=int(header["last_lsn"]),
            segments={int(n): (int(size), int(frames)) for n, size, frames in header["segments"]},
            lives=lives,
        )
    except (StopIteration, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed: {exc}") from None
    return hint


def _rows(unpacker: msgpack.Unpacker, count: int) -> Iterator[LifeRow]:
    for _ in range(count):
        row = next(unpacker)
        if type(row) is not list or len(row) != ROW_FIELDS:
            raise ValueError("a life row of the wrong shape")
        if any(type(row[i]) is not bytes for i in _OP_COLUMNS) or (
            len({len(row[i]) for i in _OP_COLUMNS}) != 1
        ):
            raise ValueError("a life row whose op columns differ in length")
        yield row


__all__ = ["HINT_NAME", "Hint", "path_in", "read", "remove", "write"]
