"""``syncd backup`` against a running server, and ``syncd verify`` on the copy
(the backup itself and the checks: tests/store/test_backup.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ADMIN
from tests.http.support import issue, op


async def test_backs_up_a_running_server_and_verifies(spawn_server: Any, tmp_path: Path) -> None:
    server = spawn_server({})
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        await op(client, h, "lw:title", {"op": "set", "value": "kept"})
    env = {**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN}
    dest = tmp_path / "copy"
    cli = [sys.executable, "-m", "syncd"]
    done = subprocess.run(
        [*cli, "backup", str(dest), "--url", server.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "OK" in done.stdout and "1 records after the snapshot" in done.stdout
    again = subprocess.run(
        [*cli, "backup", str(dest), "--url", server.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 2 and "new or empty" in again.stderr
    wrong = subprocess.run(
        [*cli, "backup", str(tmp_path / "x"), "--url", server.url, "--token", "nope"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert wrong.returncode == 1 and "401" in wrong.stderr
    checked = subprocess.run(
        [*cli, "verify", str(dest)], env=env, capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0 and "OK" in checked.stdout
    (next((dest / "log").iterdir())).write_bytes(b"\x01" * 64)
    broken = subprocess.run(
        [*cli, "verify", str(dest)], env=env, capture_output=True, text=True, timeout=60
    )
    assert broken.returncode == 1 and "DAMAGED" in broken.stdout
