"""``syncd backup a/b/DEST`` makes the missing directories on the way to DEST;
when the backup fails it removes them too, so that the file system is as it
was (docs/operations.md#backup-and-restore: "it removes what it wrote")."""

from __future__ import annotations

import os
from pathlib import Path

from tests.cli.test_backup_errors import run_cli
from tests.conftest import ADMIN, free_port


def test_a_failed_backup_removes_the_parents_it_made(tmp_path: Path) -> None:
    env = {**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN}
    kept = tmp_path / "kept"
    kept.mkdir()
    dest = kept / "made" / "also-made" / "copy"
    done = run_cli("backup", str(dest), "--url", f"http://127.0.0.1:{free_port()}", env=env)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert list(kept.iterdir()) == []  # not kept/made/also-made: nothing it made is left
