"""``syncd backup`` interrupted (Ctrl-C) while it verifies the copy, the
last step: it says so in one line and leaves ``DEST`` as it was, as when
interrupted earlier (docs/operations.md#backup-and-restore). It printed
"syncd backup: interrupted" and left the whole copy, manifest and all,
unverified: a backup that exits 0 is one that verified, and this one had
not."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.cli.support import backup_signalled_on_open, server_to_back_up


def backup_interrupted_verifying(dest: Path, url: str) -> subprocess.CompletedProcess[str]:
    """``syncd backup DEST`` in a real process that sends itself SIGINT as it
    opens the first file under ``DEST/log/``: only the verify opens files
    there (the unpacking writes under the staging directory, and moves)."""
    return backup_signalled_on_open(dest, url, signal.SIGINT, under=str(dest / "log") + "/")


@pytest.fixture
async def url(spawn_server: Any) -> str:
    return await server_to_back_up(spawn_server)


def test_a_backup_interrupted_while_verifying_leaves_dest_as_it_was(
    url: str, tmp_path: Path
) -> None:
    dest = tmp_path / "copy"
    done = backup_interrupted_verifying(dest, url)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr == f"syncd backup: interrupted; {dest} is as it was\n"
    assert not dest.exists()
