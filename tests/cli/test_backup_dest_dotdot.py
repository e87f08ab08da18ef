"""``syncd backup DIR/missing/..``: the path names DIR, whatever ``missing``
is. Taken as a new directory (it does not exist, as text), DIR's files were
neither refused as "not empty" nor spared: a failed backup removed the
directory it thought it had made, which was DIR and everything in it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.cli.test_backup_errors import one_line, run_cli
from tests.conftest import ADMIN, free_port


def refused_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


def test_a_dest_through_a_missing_directory_and_back_is_the_directory_it_names(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN}
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "precious").write_text("mine")
    dest = f"{kept}/missing/.."
    done = run_cli("backup", dest, "--url", refused_url(), env=env)
    assert done.returncode == 2, done.stderr
    assert "must be a new or empty directory" in one_line(done)
    assert (kept / "precious").read_text() == "mine"
    assert sorted(p.name for p in kept.iterdir()) == ["precious"]


def test_a_relative_dest_with_dots_backs_up_where_it_points(tmp_path: Path) -> None:
    """``../copy`` is a usual way to name a destination: it stays allowed."""
    env = {**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN}
    here = tmp_path / "here"
    here.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "syncd", "backup", "../copy", "--url", refused_url()],
        env={**env, "PYTHONPATH": os.pathsep.join(sys.path)},
        cwd=here,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "Connection refused" in one_line(done)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]  # nothing left
