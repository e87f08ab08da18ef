"""The server's own bind, after the store is opened, may still be refused
where syncd serve's check before it passed: the port taken meanwhile (a start
whose store recovery takes a while, another process starting), or a server
run without that check. It ended with exit 1 and "cannot start: [Errno 99]
error while attempting to bind on address ...". It is now the check's own
line, naming SERVICE_BIND, exit 2, the store closed first. The real server process is run here through
syncd.server.run, which the check does not precede."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import SIGNING_KEY_HEX

RUN_THE_SERVER_ALONE = (
    "import sys; from syncd.config import from_env; from syncd.server import run;"
    " sys.exit(run(from_env()))"
)


def test_a_bind_refused_after_the_store_opened_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", RUN_THE_SERVER_ALONE],
        env={
            **os.environ,
            "SERVICE_BIND": "192.0.2.1:3000",  # TEST-NET-1: no host has it
            "SERVICE_DATA_DIR": str(tmp_path / "data"),
            "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
            "SERVICE_LOG_LEVEL": "warning",
        },
        capture_output=True,
        timeout=20,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.decode().strip().splitlines() == [
        "syncd: SERVICE_BIND: cannot listen on 192.0.2.1:3000: Cannot assign requested address"
    ]
    assert (tmp_path / "data").is_dir()  # refused after the store was opened
