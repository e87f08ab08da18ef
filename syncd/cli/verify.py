"""``syncd verify DIR``: check a data directory or a backup without changing it.

It reads what a restart would read (snapshots, log records, history files,
and a backup's manifest) so that damage shows before it is needed, and
prints the report of :func:`syncd.store.verify.verify`. Exit 0 when all is
well, 1 when something is damaged, 2 on bad usage or when files this user
may not read are all that stands in the way (no damage found in the rest).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from syncd.cli.command import Commands, add_command

LAYOUT: Final = ("log", "snapshots", "history")
"""The subdirectories every data directory and backup of the embedded store has
(``syncd.store.embedded.backup.LAYOUT``, not imported: every command would
pay for loading the store)."""

UNPACKING: Final = ".syncd-backup-unpacking"
"""Where in ``DEST`` the stream is unpacked before anything is moved into place
(``syncd.store.embedded.backup.UNPACKING``): a run killed while unpacking
(SIGKILL, a crash, a power cut) leaves ``DEST`` holding this directory, which
``syncd verify`` names and a server refuses to start on
(``syncd.store.embedded.backup.refuse_interrupted_backup``), instead of a log
without its history that a restore would take for whole. Its entries move
into ``DEST`` once all are written and fsynced, the manifest last. Killed
after that, before the empty directory is removed, the copy is whole: verify
reports it OK with a note on the leftover, and a server starts and removes it."""


def register(commands: Commands) -> None:
    parser = add_command(
        commands,
        "verify",
        run,
        help="check a data directory or a backup, read-only",
        description="Check a data directory or a backup (read-only): snapshots, log records, "
        "history files and the backup manifest.",
    )
    parser.add_argument("dir")


def verify_dir(path: str | Path) -> int:
    """Print the report on ``path``; 0 when it is whole, 1 when it is damaged,
    2 when files this user may not read keep it from knowing."""
    from syncd.store.embedded.verify import verify

    report = verify(str(path))
    print(report.text())
    return report.exit_status


def not_a_data_dir(path: Path) -> str | None:
    """Why ``path`` is not something to verify at all, or None."""
    try:
        return _not_a_data_dir(path)
    except OSError as exc:
        # A name too long, a directory on the way that may not be searched:
        # what stat says, in one line.
        return f"{path}: {exc.strerror or exc}"


def _not_a_data_dir(path: Path) -> str | None:
    if not path.exists():
        return f"{path}: no such directory"
    if not path.is_dir():
        # Only a regular file may be a saved tar: opening a FIFO to look
        # waits for a writer for ever, and a device (/dev/zero) may never end.
        if path.is_file() and _is_tar(path):
            # What POST /v1/admin/backup answers, saved as is.
            return f"{path}: a tar, not a directory: unpack it (tar -xf) and verify the directory"
        return f"{path}: not a directory"
    if not any((path / name).is_dir() for name in (*LAYOUT, UNPACKING)):
        return (
            f"{path} is not a syncd data directory or backup: it has none of "
            f"{', '.join(name + '/' for name in LAYOUT)} (a PostgreSQL node keeps its data "
            "in the database)"
        )
    return None


def _is_tar(path: Path) -> bool:
    import tarfile

    try:
        return tarfile.is_tarfile(path)
    except OSError:
        return False


def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    problem = not_a_data_dir(Path(args.dir))
    if problem is not None:
        print(f"syncd verify: {problem}", file=sys.stderr)
        return 2
    return verify_dir(args.dir)
