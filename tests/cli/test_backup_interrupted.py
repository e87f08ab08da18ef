"""``syncd backup`` stopped while it unpacks: killed (SIGKILL: no clean-up
runs), it leaves nothing a restore or ``syncd verify`` would take for a whole
backup; interrupted (Ctrl-C), it says so in one line and leaves ``DEST`` as it
was."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli.support import backup_signalled_on_open, server_to_back_up, verify
from tests.conftest import ADMIN


def backup_stopped_at_history(
    dest: Path, url: str, stop: signal.Signals
) -> subprocess.CompletedProcess[str]:
    """``syncd backup DEST`` in a real process that sends itself ``stop`` as it
    opens the first file under ``history/`` it unpacks: the log is written by
    then, the history not yet."""
    return backup_signalled_on_open(dest, url, stop, under=str(dest), containing="/history/")


@pytest.fixture
async def url(spawn_server: Any) -> str:
    """A server with a log and history to back up."""
    return await server_to_back_up(spawn_server)


def test_a_killed_backup_leaves_nothing_that_verifies_as_whole(url: str, tmp_path: Path) -> None:
    dest = tmp_path / "copy"
    done = backup_stopped_at_history(dest, url, signal.SIGKILL)
    assert done.returncode == -signal.SIGKILL
    # Nothing a server would read as its data directory: no log/ beside no history/.
    assert not (dest / "log").exists()
    checked = verify(dest)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "DAMAGED" in checked.stdout
    assert "an interrupted syncd backup" in checked.stdout


def test_an_interrupted_backup_says_so_and_leaves_dest_as_it_was(url: str, tmp_path: Path) -> None:
    dest = tmp_path / "copy"
    done = backup_stopped_at_history(dest, url, signal.SIGINT)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr == f"syncd backup: interrupted; {dest} is as it was\n"
    assert not dest.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    done = backup_stopped_at_history(empty, url, signal.SIGINT)
    assert done.returncode == 130 and list(empty.iterdir()) == []


def test_a_whole_backup_leaves_no_staging_behind(url: str, tmp_path: Path) -> None:
    dest = tmp_path / "copy"
    done = subprocess.run(
        [sys.executable, "-m", "syncd", "backup", str(dest), "--url", url],
        env={**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in dest.iterdir()) == [
        "MANIFEST.json",
        "history",
        "log",
        "snapshots",
    ]
