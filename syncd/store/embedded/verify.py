"""Checking a data directory or a backup without changing anything.

``syncd verify DIR`` opens every file read-only and takes no lock: every
snapshot, every log record after the newest one (CRC, sequence, encoding: the
checks start-up makes), the history files' frames, and, in a backup, every
file's size and SHA-256 against ``MANIFEST.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field

from syncd.store.embedded.backup import COPY_CHUNK_BYTES, FORMAT, MANIFEST
from syncd.store.embedded.history_files import HistoryFiles
from syncd.store.embedded.log import StoreCorruptError
from syncd.store.embedded.recovery import read_only_scan
from syncd.store.embedded.snapshot import list_snapshots, read_snapshot


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
    manifest: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def text(self) -> str:
        lines = [
            f"{self.path}: {'OK' if self.ok else 'DAMAGED'}",
            f"  snapshot: {'none' if not self.snapshot_lsn else f'at log sequence {self.snapshot_lsn}'}"
            f" ({self.snapshot_entries} CRDTs)",
            f"  log: {self.segments} segments, {self.records} records after the snapshot"
            + (f" (sequences {self.first_lsn}..{self.last_lsn})" if self.records else ""),
            f"  history: {self.history_files} files, {self.history_records} records",
            f"  manifest: {'checked' if self.manifest else 'none'}",
        ]
        lines += [f"  problem: {p}" for p in self.problems]
        return "\n".join(lines)


def verify(path: str) -> Report:
    """Check a data directory or backup; nothing is written."""
    report = Report(path)
    if not os.path.isdir(path):
        report.problems.append("not a directory")
        return report
    manifest_path = os.path.join(path, MANIFEST)
    if os.path.exists(manifest_path):
        report.manifest = True
        _check_manifest(path, manifest_path, report)
    snap_dir = os.path.join(path, "snapshots")
    if os.path.isdir(snap_dir):
        for lsn, snap_path in list_snapshots(snap_dir):
            try:
                snapshot = read_snapshot(snap_path, lsn)
            except StoreCorruptError as exc:
                report.problems.append(str(exc))
                continue
            if not report.snapshot_lsn:
                report.snapshot_lsn = lsn
                report.snapshot_entries = len(snapshot.entries)
    try:
        scan = read_only_scan(path)
    except (StoreCorruptError, OSError) as exc:
        report.problems.append(str(exc))
    else:
        report.segments = scan.segments
        report.records = scan.records
        report.first_lsn = scan.snapshot_lsn + 1 if scan.records else 0
        report.last_lsn = scan.durable
    history_dir = os.path.join(path, "history")
    if os.path.isdir(history_dir):
        files, records, damage = HistoryFiles.check(history_dir)
        report.history_files = files
        report.history_records = records
        report.problems += damage
    return report


def _check_manifest(path: str, manifest_path: str, report: Report) -> None:
    try:
        with open(manifest_path) as f:
            manifest = json.load(f)
        if manifest.get("format") != FORMAT:
            report.problems.append(f"{MANIFEST}: not a {FORMAT} manifest")
            return
        entries = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        report.problems.append(f"{MANIFEST}: unreadable ({exc})")
        return
    for entry in entries:
        file_path = os.path.join(path, entry["path"])
        try:
            digest = hashlib.sha256()
            size = 0
            with open(file_path, "rb") as f:
                while chunk := f.read(COPY_CHUNK_BYTES):
                    digest.update(chunk)
                    size += len(chunk)
        except OSError as exc:
            report.problems.append(f"{entry['path']}: {exc.strerror or exc}")
            continue
        if size != entry["bytes"]:
            report.problems.append(
                f"{entry['path']}: {size} bytes, the manifest says {entry['bytes']}"
            )
        elif digest.hexdigest() != entry["sha256"]:
            report.problems.append(f"{entry['path']}: SHA-256 differs from the manifest")
