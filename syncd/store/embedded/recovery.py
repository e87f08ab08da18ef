"""Recovery: the data directory's lock, and the durable state read back from disk.

Theory of operation
-------------------
``open`` takes an exclusive non-blocking ``flock`` on ``LOCK``
(:func:`acquire_lock`; ``StoreLockedError`` names the holder's pid), then
:func:`open_disk` loads the newest valid snapshot, checks every frame of the
log after it, cuts a torn tail of the last segment, a torn request whole (with
a warning naming the bytes cut; ``log.py``), cuts what the history files hold
past the log's last record (``history_files.py``), and refuses to start
(``StoreCorruptError`` naming file and offset) on damage that a crash cannot
explain. Before any of it, a FIFO, socket or device among the files of
``log/``, ``snapshots/`` or ``history/`` refuses the start, naming it
(:func:`refuse_special_files`): opening a FIFO waits for a writer for ever, and
a device may never end. Before even the ``LOCK`` file is made, a directory
that a ``syncd backup`` killed before its end left (its staging directory,
``backup.UNPACKING``) refuses the start (``InterruptedBackupError``, a
``StoreCorruptError``; :func:`syncd.store.embedded.backup.refuse_interrupted_backup`)
rather than serve a partial copy. The records after the snapshot stay
encoded (``records.LogRecords``) until the caller replays them, a chunk at a
time, so a long log is never decoded all at once. A damaged newest snapshot
is passed over when an older one and the log still cover what it held.

The same read serves ``reload()`` (with the limits of the files being written,
so only durable bytes are read) and ``syncd verify`` (:func:`read_only_scan`:
no lock, no byte changed, a torn tail is damage).
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from syncd.store.base import Recovered
from syncd.store.embedded.backup import refuse_interrupted_backup
from syncd.store.embedded.history import FileStoreHistory
from syncd.store.embedded.log import (
    STARTING,
    VERIFYING,
    LogWriter,
    Opener,
    RecordChunk,
    StoreCorruptError,
    check_segment,
    list_segments,
    remove_probe,
)
from syncd.store.embedded.records import LogRecords
from syncd.store.embedded.snapshot import (
    Snapshot,
    list_snapshots,
    read_snapshot,
    remove_temporaries,
)

log = logging.getLogger("syncd.store")


class StoreLockedError(Exception):
    """Another store (in this or another process) has the data directory open."""


@dataclass
class Disk:
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


def read_disk(
    log_dir: str,
    snap_dir: str,
    *,
    limits: dict[str, int],
    tolerate_tail: bool,
    doing: str,
) -> Disk:
    """Read the newest valid snapshot and check every log record after it; the
    records stay encoded (``LogRecords``) but for those the replay tail holds.
    ``doing``: what the caller is doing (``log.refusal``: what damage means)."""
    with _gc_paused():
        return _read_disk_unpaused(
            log_dir,
            snap_dir,
            limits=limits,
            tolerate_tail=tolerate_tail,
            doing=doing,
        )


def _read_disk_unpaused(
    log_dir: str,
    snap_dir: str,
    *,
    limits: dict[str, int],
    tolerate_tail: bool,
    doing: str,
) -> Disk:
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
            doing=doing,
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
    return Disk(snapshot, records, durable, segments, last, new_bytes, bytes_read)


def special_files(directory: str) -> list[str]:
    """The names in ``directory`` that are neither a regular file nor a
    directory (links followed: a data directory may keep ``log/`` on another
    disk): FIFOs, sockets, devices. Only ``stat``: nothing is opened."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []  # absent or unreadable: the reads name it
    found = []
    for name in names:
        try:
            mode = os.stat(os.path.join(directory, name)).st_mode
        except OSError:
            continue  # gone meanwhile, or a dangling link: the reads name it
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            found.append(name)
    return found


def refuse_special_files(*directories: str) -> None:
    """StoreCorruptError naming the first FIFO, socket or device among the
    files of ``directories``: start-up reads every segment, snapshot and
    history file, and would wait on a FIFO for a writer for ever (or read a
    device that never ends) instead of starting or saying what is wrong."""
    for directory in directories:
        for name in special_files(directory):
            raise StoreCorruptError(
                f"{os.path.join(directory, name)}: not a regular file (a FIFO, socket or "
                f"device where syncd keeps its data); refusing to start (move it away)"
            )


def open_disk(
    log_dir: str,
    snap_dir: str,
    history: FileStoreHistory,
    opener: Opener,
    segment_bytes: int,
    runway: bool,
) -> tuple[Disk, LogWriter, OSError | None]:
    """Start-up's read (in the log's I/O thread): the durable state, the history
    loaded over it, and the log's writer, its torn tail cut; the error when the
    directory takes no writes (the store then opens failed)."""
    refuse_special_files(log_dir, snap_dir, history.directory)
    remove_temporaries(snap_dir)
    # Probe files a process killed between a probe's write and its removal left.
    remove_probe(log_dir)
    remove_probe(history.directory)
    disk = read_disk(
        log_dir,
        snap_dir,
        limits={},
        tolerate_tail=True,
        doing=STARTING,
    )
    try:
        history.load(
            disk.snapshot.entries if disk.snapshot else [], disk.records.after, disk.durable
        )
    except OSError as exc:
        history.fail(exc)
    writer = LogWriter(log_dir, opener, segment_bytes, disk.segments, runway)
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
    disk = read_disk(
        os.path.join(data_dir, "log"),
        os.path.join(data_dir, "snapshots"),
        limits={},
        tolerate_tail=False,
        doing=VERIFYING,
    )
    count = 0
    for _ in disk.records:  # decodes every body: a record that is not a map fails here
        count += 1
    base = disk.snapshot.lsn if disk.snapshot else 0
    return Scan(base, len(disk.segments), count, disk.durable)


def acquire_lock(data_dir: str) -> int:
    """The directory's ``LOCK`` file, flock'd; its descriptor. First of all
    (nothing written yet, not even ``LOCK``), InterruptedBackupError for what
    a ``syncd backup`` killed before its end left (``refuse_interrupted_backup``)."""
    refuse_interrupted_backup(data_dir)
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


def release_lock(fd: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
