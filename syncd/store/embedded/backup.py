"""Online backup and verification of an embedded-store data directory.

Theory of operation
-------------------
A consistent backup is what a crash at one instant would have left: the
newest snapshot and every log segment after it, up to a record boundary. The
store (``FileStore.backup``) provides that instant: holding its snapshot lock
(no snapshot, so no log compaction) and its history lock (no history
compaction), it waits until everything queued is durable, then asks its I/O
thread (the only writer of the log and the history) for a :class:`Plan`: the
files and, for the ones still growing, their sizes at that instant. Writes go
on meanwhile; they land past the planned sizes and are not copied.

:func:`copy_plan` then copies those bytes (in a thread, never on the loop),
hashing them, fsyncs every file and directory, and writes ``MANIFEST.json``
last (renamed into place), so a directory with a manifest is a whole backup.
Starting a server on it restores it: the layout is a data directory's. The
server's first start on it moves the manifest aside (:func:`set_aside_manifest`,
to ``MANIFEST.restored.json``): from then on it writes there, the manifest no
longer describes the directory, and ``syncd verify`` checks it as the data
directory it has become instead of reporting each new byte as damage.
:func:`stream_plan` writes the same files as a tar instead, straight from the
data directory (no copy on the server's disk), the manifest last.

``syncd backup`` unpacks that tar into ``DEST/UNPACKING`` and moves its
entries into ``DEST`` once all are written, the manifest last. A run killed
before its end leaves the staging directory: a server pointed at such a
``DEST`` refuses to start (:func:`refuse_interrupted_backup`, before it
writes anything there), since what ``DEST`` holds then is nothing, or the log
without the history, or everything but the manifest. Only a run killed after
the manifest's move, with the staging directory empty, left a whole backup:
that start removes the empty directory and goes on.

``verify.py`` checks such a copy (or any data directory) without changing it.
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import logging
import os
import shutil
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from syncd.store.embedded.hint import HINT_NAME
from syncd.store.embedded.history_files import HistoryFiles
from syncd.store.embedded.log import StoreCorruptError, fsync_dir, list_segments
from syncd.store.embedded.snapshot import list_snapshots

log = logging.getLogger("syncd.store")

MANIFEST: Final = "MANIFEST.json"
RESTORED_MANIFEST: Final = "MANIFEST.restored.json"
"""Where a server's start moves the manifest of a backup restored as its data
directory: kept (what the backup held, for reference), but out of the way of
``syncd verify``, which checks a directory with a ``MANIFEST.json`` file for
file against it."""
LAYOUT: Final = ("log", "snapshots", "history")
"""The subdirectories of every data directory and backup of the embedded store."""
UNPACKING: Final = ".syncd-backup-unpacking"
"""Where ``syncd backup`` unpacks the stream before moving it into place
(``syncd.cli.verify.UNPACKING``): a directory holding it is a backup
interrupted before it was whole."""
FORMAT: Final = "syncd-backup"
FORMAT_VERSION: Final = 1

COPY_CHUNK_BYTES: Final = 1024 * 1024
"""Bytes read and written at a time: large enough that a system call per chunk
costs nothing, small enough to stay in the CPU caches while hashed."""

EXTRA_FILES: Final = ("admin_token",)
"""Copied when present: without the generated admin secret a restored server
would make a new one (tokens signed with SERVICE_SIGNING_KEY stay valid)."""


@dataclass
class Plan:
    """What to copy: ``(path relative to the data directory, bytes)``."""

    data_dir: str
    lsn: int
    """Every record up to this log sequence number is in the copy."""
    snapshot_lsn: int
    files: list[tuple[str, int]] = field(default_factory=list)


def make_plan(
    data_dir: str, lsn: int, active: tuple[str, int] | None, history: HistoryFiles
) -> Plan:
    """The files of a consistent copy (call in the store's I/O thread, where the
    log and the history are written): ``active`` is the log segment being
    appended to with its size now; history segments are fsynced and taken at
    their sizes now."""
    log_dir = os.path.join(data_dir, "log")
    snap_dir = os.path.join(data_dir, "snapshots")
    snapshots = list_snapshots(snap_dir)
    snapshot_lsn = snapshots[0][0] if snapshots else 0
    plan = Plan(data_dir, lsn, snapshot_lsn)
    if snapshots:
        path = snapshots[0][1]
        plan.files.append((os.path.relpath(path, data_dir), os.path.getsize(path)))
    segments = list_segments(log_dir)
    start = 0
    while start + 1 < len(segments) and segments[start + 1][0] <= snapshot_lsn + 1:
        start += 1
    for first, path in segments[start:]:
        if first > lsn:
            break
        size = active[1] if active is not None and path == active[0] else os.path.getsize(path)
        plan.files.append((os.path.relpath(path, data_dir), size))
    history.sync()
    for path, size in history.files():
        plan.files.append((os.path.relpath(path, data_dir), size))
    table = os.path.join(data_dir, "history", HINT_NAME)
    if os.path.isfile(table):
        # The key directory's table: a restored copy starts from it and the
        # history frames after its end, instead of reading every frame. (Its
        # end is at or before the sizes taken above: it was written earlier.)
        plan.files.append((os.path.relpath(table, data_dir), os.path.getsize(table)))
    for name in EXTRA_FILES:
        path = os.path.join(data_dir, name)
        if os.path.isfile(path):
            plan.files.append((name, os.path.getsize(path)))
    return plan


def _manifest(plan: Plan, entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "lsn": plan.lsn,
        "snapshot_lsn": plan.snapshot_lsn,
        "files": entries,
    }


TAR_BUFFER_BYTES: Final = 256 * 1024
"""What the tar stream hands to ``write`` at a time."""


class _Hashing(io.RawIOBase):
    """The first ``size`` bytes of a file, hashed as they are read."""

    def __init__(self, path: str, size: int) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._left = size
        self._path = path
        self._size = size
        self.digest = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        want = min(len(view), self._left)
        if want == 0:
            return 0
        got = self._file.readinto(view[:want])
        if not got:
            raise OSError(f"{self._path}: shorter than the {self._size} bytes planned")
        self.digest.update(view[:got])
        self._left -= got
        return got

    def close(self) -> None:
        self._file.close()
        super().close()


class _Sink(io.RawIOBase):
    def __init__(self, write: Callable[[bytes], None]) -> None:
        self._write = write

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._write(bytes(data))
        return len(data)


def stream_plan(plan: Plan, write: Callable[[bytes], None]) -> dict[str, Any]:
    """What ``plan`` names as one tar, handed to ``write`` in pieces (call in a
    thread: it reads the files). The files in the tar have a data directory's
    layout and ``MANIFEST.json`` comes last; the manifest."""
    entries = []
    now = int(datetime.datetime.now(datetime.UTC).timestamp())
    with tarfile.open(fileobj=_Sink(write), mode="w|", bufsize=TAR_BUFFER_BYTES) as tar:
        for sub in LAYOUT:
            info = tarfile.TarInfo(sub)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            # Not TarInfo's 0 (1970): an unpacked backup's directories would
            # look decades old to age-based clean-up (find -mtime).
            info.mtime = now
            tar.addfile(info)
        for rel, size in plan.files:
            path = os.path.join(plan.data_dir, rel)
            info = tarfile.TarInfo(rel)
            info.size = size
            stat = os.stat(path)
            info.mode = stat.st_mode & 0o777
            info.mtime = int(stat.st_mtime)
            source = _Hashing(path, size)
            try:
                tar.addfile(info, source)
            finally:
                source.close()
            entries.append({"path": rel, "bytes": size, "sha256": source.digest.hexdigest()})
        manifest = _manifest(plan, entries)
        data = json.dumps(manifest, indent=1).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(data)
        info.mode = 0o644
        info.mtime = now
        tar.addfile(info, io.BytesIO(data))
    return manifest


def copy_plan(plan: Plan, dest: str) -> dict[str, Any]:
    """Copy what ``plan`` names into ``dest`` (new or empty), durably; the manifest."""
    if os.path.exists(dest) and os.listdir(dest):
        raise FileExistsError(f"{dest}: the backup destination must be new or empty")
    os.makedirs(dest, exist_ok=True)
    for sub in LAYOUT:
        os.makedirs(os.path.join(dest, sub), exist_ok=True)
    entries = []
    for rel, size in plan.files:
        digest = _copy(os.path.join(plan.data_dir, rel), os.path.join(dest, rel), size)
        entries.append({"path": rel, "bytes": size, "sha256": digest})
    for sub in (*LAYOUT, "."):
        fsync_dir(os.path.join(dest, sub))
    manifest = _manifest(plan, entries)
    tmp = os.path.join(dest, MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(dest, MANIFEST))
    fsync_dir(dest)
    return manifest


def _copy(src: str, dst: str, size: int) -> str:
    digest = hashlib.sha256()
    left = size
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while left > 0:
            chunk = fin.read(min(COPY_CHUNK_BYTES, left))
            if not chunk:
                raise OSError(f"{src}: shorter than the {size} bytes planned")
            fout.write(chunk)
            digest.update(chunk)
            left -= len(chunk)
        fout.flush()
        os.fsync(fout.fileno())
    shutil.copymode(src, dst)
    return digest.hexdigest()


def set_aside_manifest(data_dir: str) -> bool:
    """At a server's start (lock held, nothing written yet): a data directory
    holding ``MANIFEST.json`` is a restored backup. The server is about to
    write there (new log segments, history, snapshots), after which the
    manifest no longer describes it and ``syncd verify`` would report each
    difference as damage: move it to ``RESTORED_MANIFEST``, and say so (once:
    the next start finds no manifest). Whether it was moved."""
    src = os.path.join(data_dir, MANIFEST)
    if not os.path.lexists(src):
        return False
    try:
        # A rename opens nothing: a FIFO in its place cannot block it.
        os.replace(src, os.path.join(data_dir, RESTORED_MANIFEST))
        fsync_dir(data_dir)
    except OSError as exc:
        log.warning(
            "%s: a backup's manifest, which could not be moved aside (%s); it no longer "
            "describes the directory once this server writes: remove it",
            src,
            exc,
        )
        return False
    log.info(
        "%s was restored from a backup: its %s, which no longer describes the directory "
        "once this server writes to it, is moved to %s (syncd verify checks the directory "
        "as a data directory from now on)",
        data_dir,
        MANIFEST,
        RESTORED_MANIFEST,
    )
    return True


class InterruptedBackupError(StoreCorruptError):
    """The data directory is what a ``syncd backup`` killed before its end left."""


def refuse_interrupted_backup(data_dir: str) -> None:
    """At a server's start, before anything is written to ``data_dir``:
    InterruptedBackupError when it holds a ``syncd backup``'s staging
    directory (``UNPACKING``) for a backup that never became whole. An empty
    staging directory beside the manifest (or the manifest a start moved
    aside) is what a run killed between its last two steps left: the backup
    is whole, and the empty directory is removed."""
    staging = os.path.join(data_dir, UNPACKING)
    if not os.path.lexists(staging):
        return
    manifest = any(
        os.path.lexists(os.path.join(data_dir, n)) for n in (MANIFEST, RESTORED_MANIFEST)
    )
    try:
        empty = not os.path.islink(staging) and os.path.isdir(staging) and not os.listdir(staging)
    except OSError:
        empty = False
    if not (manifest and empty):
        raise InterruptedBackupError(
            f"{data_dir} holds {UNPACKING}/: a syncd backup into it was interrupted "
            "before the copy was whole, so it is not a data directory (syncd verify "
            "names it too); take the backup again into a new or empty directory, or "
            "set SERVICE_DATA_DIR to a whole copy"
        )
    try:
        os.rmdir(staging)
    except FileNotFoundError:
        return  # another start (refused then: the lock is taken next) was first
    fsync_dir(data_dir)
    log.info(
        "%s: removed the empty %s/ that a syncd backup stopped just before its end "
        "left (the backup, manifest included, was already in place)",
        data_dir,
        UNPACKING,
    )
