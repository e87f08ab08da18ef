"""Start-up failures that no restart cures exit 2 (a refusal: one line, and
systemd/syncd.service does not restart it, RestartPreventExitStatus=2); they
exited 1 with "cannot start: [Errno 13] ...", and the unit restarted the
node every RestartSec for ever. What may pass (no space left, too many open
files) still exits 1 and is restarted, within the unit's start limit."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncd.server import REFUSED_START_ERRNOS, start_refusal
from tests.conftest import ADMIN, SIGNING_KEY_HEX

AS_NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
"""How a root test runs the server as another user, for a file it may not use
(root may use any; subprocess's user= could not exec an interpreter kept
under root's home)."""


def serve(data_dir: Path, *, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``syncd serve`` on ``data_dir`` run to its end (a start that works is
    stopped by the timeout: the test fails)."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "syncd", "serve"],
        env={
            **os.environ,
            "SERVICE_BIND": "127.0.0.1:0",
            "SERVICE_DATA_DIR": str(data_dir),
            "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
            "SERVICE_ADMIN_TOKEN": ADMIN,
        },
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory any user may use (pytest's tmp_path is its owner's only)."""
    path = Path(tempfile.mkdtemp(prefix="syncd-refusal-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_store_files_of_another_user_are_a_refusal(open_dir: Path) -> None:
    """The data directory is this user's, a file in it is not (``sudo syncd
    serve`` once, then the service user): exit 2, the file named."""
    data = open_dir / "data"
    data.mkdir(mode=0o777)
    data.chmod(0o777)
    log = data / "log"
    log.mkdir(mode=0o700)
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root without setpriv: no other user to run as")
        done = serve(data, prefix=AS_NOBODY)
    else:
        log.chmod(0)
        done = serve(data)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if "WARNING" not in line]
    assert lines == [
        f"syncd: cannot start: {log}: Permission denied ({REFUSED_START_ERRNOS[errno.EACCES]})"
    ], done.stderr


def test_a_file_where_the_store_keeps_a_directory_is_a_refusal(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "snapshots").write_text("not a directory")
    done = serve(data)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"syncd: cannot start: {data / 'snapshots'}: File exists"
        f" ({REFUSED_START_ERRNOS[errno.EEXIST]})"
    )
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EMFILE, errno.EIO], ids=errno.errorcode.get)
def test_what_may_pass_is_no_refusal(code: int) -> None:
    assert start_refusal(OSError(code, os.strerror(code), "/data/log")) is None
