"""A SERVICE_DATA_DIR syncd cannot use (a file, under a file, a directory it
may not write) stopped the start with exit 1 and the bare OS error in a log
line ("cannot start: [Errno 17] File exists: '/srv/data'"), naming neither
the variable nor the problem. It is now one line naming SERVICE_DATA_DIR and
exit 2, as for any bad setting, before anything is opened."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import SIGNING_KEY_HEX, start_to_the_end


def refusal(proc: subprocess.CompletedProcess[bytes]) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_file_is_not_a_data_directory(tmp_path: Path) -> None:
    path = tmp_path / "data"
    path.write_text("not a directory")
    line = refusal(start_to_the_end(path))
    assert line == f"syncd: SERVICE_DATA_DIR: {path} is not a directory"


def test_a_data_directory_that_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    path = tmp_path / "file" / "data"
    line = refusal(start_to_the_end(path))
    assert line == f"syncd: SERVICE_DATA_DIR: cannot create {path}: Not a directory"


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="runs syncd as another user: needs root and setpriv",
)
@pytest.mark.parametrize("admin_token", [None, "a-given-admin-token-0123"])
def test_a_data_directory_this_user_may_not_write(admin_token: str | None) -> None:
    # Not under tmp_path: its parents are root's alone, nobody could reach it.
    with tempfile.TemporaryDirectory() as top:
        Path(top).chmod(0o755)
        path = Path(top) / "data"
        path.mkdir()
        line = refusal(run_as_nobody(path, admin_token))
    assert line == f"syncd: SERVICE_DATA_DIR: {path} is not writable by this user"


def run_as_nobody(path: Path, admin_token: str | None) -> subprocess.CompletedProcess[bytes]:
    env = {
        "PATH": "/usr/bin:/bin",
        # Any free port: port 1 is one nobody may not listen on, refused first.
        "SERVICE_BIND": "127.0.0.1:0",
        "SERVICE_DATA_DIR": str(path),
        "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
    }
    if admin_token is not None:
        env["SERVICE_ADMIN_TOKEN"] = admin_token
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    return subprocess.run(
        [*nobody, sys.executable, "-m", "syncd"],
        env=env,
        capture_output=True,
        timeout=20,
        cwd="/",
    )
