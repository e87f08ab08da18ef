"""``syncd backup`` with a root admin secret that is not ASCII: it sends the
secret's bytes as the server holds them (it refused with a UnicodeEncodeError
traceback, or sent Latin-1 and got 401); one it cannot send in a header at all
is one line, exit 2, with nothing created."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def backup(dest: Path, url: str, secret: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "syncd", "backup", str(dest), "--url", url],
        env={**os.environ, "SERVICE_ADMIN_TOKEN": secret},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "secret",
    [
        "tök€-admin-secret-0123456789",  # UTF-8, outside Latin-1
        "caf\udce9-admin-secret-0123456789",  # Latin-1 bytes in the environment: not UTF-8
    ],
)
def test_a_non_ascii_secret_is_sent_as_the_server_holds_it(
    spawn_server: Any, tmp_path: Path, secret: str
) -> None:
    server = spawn_server({"SERVICE_ADMIN_TOKEN": secret})
    dest = tmp_path / "copy"
    done = backup(dest, server.url, secret)
    assert done.returncode == 0, done.stderr
    assert "OK" in done.stdout


@pytest.mark.parametrize("secret", ["two\nlines", "nul\x7fdel", " leading-blank"])
def test_a_secret_no_header_can_carry_is_one_line(tmp_path: Path, secret: str) -> None:
    dest = tmp_path / "copy"
    done = backup(dest, "http://127.0.0.1:1", secret)
    assert done.returncode == 2
    assert done.stderr == (
        "syncd backup: the admin token cannot be sent in a header: it holds a control"
        " character or starts or ends with a blank\n"
    )
    assert not dest.exists()
