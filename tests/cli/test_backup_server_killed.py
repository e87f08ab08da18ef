"""``syncd backup`` while the server it backs up is killed: the chunked answer
stops before its last chunk, and the command names the broken transfer (exit
1, ``DEST`` as it was) instead of unpacking what came as if it were whole."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ADMIN
from tests.http.support import issue, op


def _downloaded(pid: int, dest: Path) -> int:
    """Bytes in the download file (unlinked, in ``dest``) that ``pid`` has open."""
    fds = Path(f"/proc/{pid}/fd")
    for fd in fds.iterdir():
        try:
            if os.readlink(fd).startswith(str(dest) + "/"):
                return os.stat(fd).st_size
        except OSError:
            continue
    return 0


async def test_a_server_killed_mid_backup_fails_the_backup(
    spawn_server: Any, tmp_path: Path
) -> None:
    server = spawn_server({})
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        h = await issue(client)
        for i in range(24):  # some 2.4 MB to copy (log and history): over 2 s at 1 MiB/s
            r = await op(client, h, f"lw:k{i}", {"op": "set", "value": f"{i}" + "x" * 50_000})
            assert r.status_code == 200, r.text
    dest = tmp_path / "copy"
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "syncd",
            "backup",
            str(dest),
            "--url",
            server.url,
            "--max-rate",
            "1",
        ],
        env={**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not (dest.exists() and _downloaded(cli.pid, dest)):
            assert cli.poll() is None and time.monotonic() < deadline, cli.communicate()
            time.sleep(0.01)
        server.kill()  # mid-stream: the rate holds the rest back
        out, err = cli.communicate(timeout=30)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert cli.returncode == 1, out + err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith("syncd backup: ") and "broke off before its end" in err, err
    assert not dest.exists()
