"""Checking a data directory or a backup without changing anything.

``syncd verify DIR`` opens every file read-only and takes no lock: every
snapshot, every log record after the newest one (CRC, sequence, encoding: the
checks start-up makes), the history files' frames, and, in a backup, every
file's size and SHA-256 against ``MANIFEST.json``, and that it holds no file
the manifest does not name (such a file is not what the backup took, and a
server started on the copy would read a log segment or snapshot among them).

A running server's directory changes under the read: its compaction deletes
snapshots, log and history segments verify had listed, its appends grow the
newest ones. A pass that found problems while the directory changed is read
again (:data:`MAX_PASSES`): a file gone since verify listed it is no damage.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from typing import Any, Final

from syncd.store.embedded.backup import (
    COPY_CHUNK_BYTES,
    FORMAT,
    LAYOUT,
    MANIFEST,
    RESTORED_MANIFEST,
    UNPACKING,
)
from syncd.store.embedded.history_files import HistoryFiles
from syncd.store.embedded.log import StoreCorruptError
from syncd.store.embedded.recovery import read_only_scan, special_files
from syncd.store.embedded.snapshot import list_snapshots, read_snapshot

ACCESS_ERRNOS: Final = frozenset({errno.EACCES, errno.EPERM})
"""A file this user may not read: no damage, and nothing to say whether it is
whole (verify run as another user than the one that owns the directory)."""

UNREADABLE_EXIT: Final = 2
"""The exit status of a report with files it could not read and no damage
found: what verify could not do, as a refusal is, not damage (exit 1)."""

MAX_UNLISTED_NAMED: Final = 20
"""Files not in a backup's manifest named one by one in the report; past
this many (a backup unpacked over something else), the rest are counted."""


MAX_PASSES: Final = 5
"""Reads of a directory that changed during the read (a running server's)
before the problems of the last one are reported anyway. Each pass reads
every file, so this bounds verify's time to a few reads; a compaction lands
inside a pass seldom (about 1 pass in 15 on a busy server with small
segments), so several passes in a row each changed and each with problems
mean the directory is rewritten faster than it can be read."""

Fingerprint = list[tuple[str, str, int, int, int]]
"""What a change of a directory's files changes: per file of the layout, its
directory, name, inode, size and modification time."""


@dataclass
class Report:
    path: str
    snapshot_lsn: int = 0
    snapshot_entries: int = 0
    segments: int = 0
    records: int = 0
    first_lsn: int = 0
    last_lsn: int = 0
    history_files: int = 0
    history_records: int = 0
    manifest: str = "none"
    """none, checked, or unreadable (not read, or not one verify can check)."""
    problems: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    """Files this user may not read: neither damage nor known to be whole."""
    _named: set[str] = field(default_factory=set, repr=False)
    """The files :meth:`file_problem` has reported (absolute, normalized)."""
    notes: list[str] = field(default_factory=list)
    """What is worth knowing and is no damage (the copy is still OK)."""

    @property
    def ok(self) -> bool:
        return not self.problems and not self.unreadable

    @property
    def exit_status(self) -> int:
        """0 when whole, 1 when damaged, :data:`UNREADABLE_EXIT` when only
        files this user may not read stand in the way of knowing."""
        if self.problems:
            return 1
        return UNREADABLE_EXIT if self.unreadable else 0

    def file_problem(self, filename: str, exc: OSError) -> None:
        """What an OSError reading ``filename`` says, once per file however
        many of the reads (the manifest's check, the snapshot, log and
        history reads) hit it; ``filename`` is absolute or relative to the
        checked directory, and named as the first read to fail gave it."""
        key = os.path.normpath(os.path.join(self.path, filename))
        if key in self._named:
            return
        self._named.add(key)
        line = f"{filename}: {exc.strerror or exc}"
        (self.unreadable if exc.errno in ACCESS_ERRNOS else self.problems).append(line)

    def text(self) -> str:
        verdict = "DAMAGED" if self.problems else "NOT CHECKED" if self.unreadable else "OK"
        lines = [
            f"{self.path}: {verdict}",
            f"  snapshot: {self._snapshot_text()}",
            f"  log: {self.segments} segments, {self.records} records after the snapshot"
            + (f" (sequences {self.first_lsn}..{self.last_lsn})" if self.records else ""),
            f"  history: {self.history_files} files, {self.history_records} records",
            f"  manifest: {self.manifest}",
        ]
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  problem: {p}" for p in self.problems]
        lines += [f"  unreadable: {u}" for u in self.unreadable]
        if self.unreadable:
            lines.append(
                "  note: files this user may not read are not checked: run syncd verify as"
                " the user that owns the directory (the service user), or as root"
            )
        return "\n".join(lines)

    def _snapshot_text(self) -> str:
        if not self.snapshot_lsn:
            return "none"
        # The store reads each CRDT from the history files when first used:
        # its snapshots carry no CRDT state, and "(0 CRDTs)" read as loss.
        if not self.snapshot_entries:
            held = "carries no CRDT state: CRDTs are read from the history files"
        else:
            held = f"carries the state of {self.snapshot_entries} CRDTs"
        return f"at log sequence {self.snapshot_lsn} ({held})"


def verify(path: str) -> Report:
    """Check a data directory or backup; nothing is written. Read again when
    the directory changed while a pass that found problems read it."""
    for _ in range(MAX_PASSES):
        before = _fingerprint(path)
        report = _verify_pass(path)
        if report.ok or _fingerprint(path) == before:
            return report
    report.notes.append(
        f"the directory changed while each of {MAX_PASSES} reads of it was under way (a "
        "running server's writes and compactions): a problem below may be a file it "
        "removed or was writing meanwhile; verify again, or take a backup and verify that"
    )
    return report


def _fingerprint(path: str) -> Fingerprint:
    """The layout's files as they are now (links followed, as the reads do)."""
    found: Fingerprint = []
    for sub in LAYOUT:
        try:
            entries = list(os.scandir(os.path.join(path, sub)))
        except OSError:
            continue  # absent or unreadable: the reads name it
        for entry in entries:
            try:
                st = entry.stat()
            except OSError:
                st = None  # gone meanwhile (or a dangling link)
            if st is None:
                found.append((sub, entry.name, 0, -1, 0))
            else:
                found.append((sub, entry.name, st.st_ino, st.st_size, st.st_mtime_ns))
    return sorted(found)


def _verify_pass(path: str) -> Report:
    """One read of everything."""
    report = Report(path)
    if not os.path.isdir(path):
        report.problems.append("not a directory")
        return report
    special = _special_files(path)
    if special:
        # Opening a FIFO blocks until something writes to it: verify would
        # hang instead of answering, so nothing is read.
        report.problems += [f"{rel}: not a regular file" for rel in special]
        report.problems.append("nothing else was read (a special file could block the reads)")
        return report
    leftover = False
    if os.path.lexists(os.path.join(path, UNPACKING)):
        if _empty_staging_beside_manifest(path):
            # Killed between its last two steps: everything, manifest
            # included, is in place; the server starts and removes it.
            leftover = True
            report.notes.append(
                f"{UNPACKING}/: empty, left by a syncd backup stopped just before its end "
                "(the copy, manifest included, was already in place): harmless, a server "
                "starting here removes it"
            )
        else:
            # What a syncd backup killed before its end left: the files it had
            # written may look like a whole data directory without being one.
            report.problems.append(
                f"{UNPACKING}/: an interrupted syncd backup, not a whole one: take the backup again"
            )
    manifest_path = os.path.join(path, MANIFEST)
    if os.path.exists(manifest_path):
        _check_manifest(path, manifest_path, report, leftover)
    snap_dir = os.path.join(path, "snapshots")
    if os.path.isdir(snap_dir):
        for lsn, snap_path in list_snapshots(snap_dir):
            try:
                snapshot = read_snapshot(snap_path, lsn)
            except StoreCorruptError as exc:
                report.problems.append(str(exc))
                continue
            except OSError as exc:
                # A directory, or a file that may not be read, under a snapshot's name.
                report.file_problem(exc.filename or snap_path, exc)
                continue
            if not report.snapshot_lsn:
                report.snapshot_lsn = lsn
                report.snapshot_entries = len(snapshot.entries)
    try:
        scan = read_only_scan(path)
    except OSError as exc:
        report.file_problem(exc.filename or path, exc)
    except StoreCorruptError as exc:
        problem = str(exc)
        if problem not in report.problems:  # a snapshot's damage, found again
            report.problems.append(problem)
    else:
        report.segments = scan.segments
        report.records = scan.records
        report.first_lsn = scan.snapshot_lsn + 1 if scan.records else 0
        report.last_lsn = scan.durable
    history_dir = os.path.join(path, "history")
    if os.path.isdir(history_dir):
        try:
            files, records, damage = HistoryFiles.check(history_dir)
        except OSError as exc:
            # A directory, or a file that may not be read, under a history file's name.
            report.file_problem(exc.filename or history_dir, exc)
        else:
            report.history_files = files
            report.history_records = records
            report.problems += damage
    return report


def _empty_staging_beside_manifest(path: str) -> bool:
    """The one case of a staging directory a server starts on
    (``syncd.store.embedded.backup.refuse_interrupted_backup``, the same
    test): an empty directory, not a link, beside the manifest (or the
    manifest a start moved aside)."""
    staging = os.path.join(path, UNPACKING)
    manifest = any(os.path.lexists(os.path.join(path, n)) for n in (MANIFEST, RESTORED_MANIFEST))
    try:
        empty = not os.path.islink(staging) and os.path.isdir(staging) and not os.listdir(staging)
    except OSError:
        empty = False
    return manifest and empty


def _special_files(path: str) -> list[str]:
    """The FIFOs, sockets and devices among the files verify reads (links are
    followed: a data directory may keep ``log/`` on another disk)."""
    found = [MANIFEST] if MANIFEST in special_files(path) else []
    for sub in LAYOUT:
        found += [os.path.join(sub, name) for name in special_files(os.path.join(path, sub))]
    return found


def _check_manifest(path: str, manifest_path: str, report: Report, leftover: bool) -> None:
    """``leftover``: the empty staging directory beside the manifest is not
    counted as a directory the backup did not take."""
    entries = _read_manifest(path, manifest_path, report)
    if entries is None:
        report.manifest = "unreadable"
        return
    report.manifest = "checked"
    listed: set[str] = set()
    for entry in entries:
        rel = entry["path"]
        listed.add(rel)
        _check_entry(os.path.join(path, rel), rel, entry, report)
    _check_unlisted(path, listed, report, leftover)


def _read_manifest(path: str, manifest_path: str, report: Report) -> list[dict[str, Any]] | None:
    """The manifest's file entries, or None with the problem reported."""
    try:
        with open(manifest_path) as f:
            manifest = json.load(f)
    except OSError as exc:
        report.file_problem(MANIFEST, exc)
        return None
    except ValueError as exc:
        report.problems.append(f"{MANIFEST}: unreadable ({exc})")
        return None
    except RecursionError:
        # json's decoder recurses once per nested array or object: a damaged
        # manifest of many "[" would end verify with a traceback.
        report.problems.append(f"{MANIFEST}: unreadable (nested too deeply)")
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        report.problems.append(f"{MANIFEST}: not a {FORMAT} manifest")
        return None
    entries = manifest.get("files")
    if not isinstance(entries, list):
        report.problems.append(f"{MANIFEST}: no list of files")
        return None
    for number, entry in enumerate(entries, 1):
        problem = _bad_entry(entry)
        if problem is not None:
            report.problems.append(f"{MANIFEST}: file {number}: {problem}")
            return None
    return entries


def _bad_entry(entry: Any) -> str | None:
    """Why a manifest entry cannot be checked, or None."""
    if not (
        isinstance(entry, dict)
        and isinstance(entry.get("path"), str)
        and type(entry.get("bytes")) is int
        and isinstance(entry.get("sha256"), str)
    ):
        return "expected {path, bytes, sha256}"
    rel = entry["path"]
    parts = rel.split("/")
    # Names the server writes are plain relative paths; anything else would
    # have verify read (and a restore trust) a file outside the backup.
    # A NUL names no file (the system calls refuse it with ValueError).
    if os.path.isabs(rel) or "\0" in rel or any(part in ("", ".", "..") for part in parts):
        return f"{rel!r} is not a path inside the backup"
    return None


def _check_entry(file_path: str, rel: str, entry: dict[str, Any], report: Report) -> None:
    """The file's size and SHA-256 against its manifest entry."""
    try:
        # O_NOFOLLOW: a link is not the file the backup took, wherever it
        # points. O_NONBLOCK: a FIFO in a file's place would block the open
        # (until something writes to it); fstat below refuses it instead.
        fd = os.open(file_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            report.problems.append(f"{rel}: a symbolic link, not the file the backup took")
        else:
            report.file_problem(rel, exc)
        return
    digest = hashlib.sha256()
    size = 0
    try:
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                report.problems.append(f"{rel}: not a regular file")
                return
            while chunk := f.read(COPY_CHUNK_BYTES):
                digest.update(chunk)
                size += len(chunk)
    except OSError as exc:
        report.file_problem(rel, exc)
        return
    if size != entry["bytes"]:
        report.problems.append(f"{rel}: {size} bytes, the manifest says {entry['bytes']}")
    elif digest.hexdigest() != entry["sha256"]:
        report.problems.append(f"{rel}: SHA-256 differs from the manifest")


def _check_unlisted(path: str, listed: set[str], report: Report, leftover: bool) -> None:
    """Every file and directory the manifest does not name is a problem: what
    a server started on the copy would read (a log segment, a snapshot) must
    be what the backup took, and nothing else."""
    unlisted = sorted(_unlisted(path, listed, leftover))
    for rel in unlisted[:MAX_UNLISTED_NAMED]:
        report.problems.append(f"{rel}: not in the manifest (not part of the backup as taken)")
    if len(unlisted) > MAX_UNLISTED_NAMED:
        more = len(unlisted) - MAX_UNLISTED_NAMED
        report.problems.append(f"and {more} more files not in the manifest")


def _unlisted(path: str, listed: set[str], leftover: bool) -> list[str]:
    found = []
    for directory, dirs, files in os.walk(path):
        rel_dir = os.path.relpath(directory, path)
        if rel_dir == "." and leftover and UNPACKING in dirs:
            dirs.remove(UNPACKING)  # the empty staging directory (checked: not a link)
        for name in list(dirs):
            rel = os.path.normpath(os.path.join(rel_dir, name))
            # Only the layout's own directories belong; a link to one is not it
            # (os.walk lists links to directories among dirs, and does not follow them).
            if (
                rel_dir != "."
                or name not in LAYOUT
                or os.path.islink(os.path.join(directory, name))
            ):
                found.append(rel + "/")
                dirs.remove(name)
        for name in files:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if rel != MANIFEST and rel not in listed:
                found.append(rel)
    return found
