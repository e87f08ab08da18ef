"""``syncd verify DIR``: check a data directory or a backup without changing it.

It reads what a restart would read (snapshots, log records, history files,
and a backup's manifest) so that damage shows before it is needed, and
prints the report of :func:`syncd.store.verify.verify`. Exit 0 when all is
well, 1 when something is damaged, 2 on bad usage.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

from syncd.cli.command import Commands, add_command


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
    """Print the report on ``path``; 0 when it is whole, 1 when it is damaged."""
    from syncd.store.verify import verify

    report = verify(str(path))
    print(report.text())
    return 0 if report.ok else 1


def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    return verify_dir(args.dir)
