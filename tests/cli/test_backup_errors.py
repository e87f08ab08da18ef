"""``syncd backup`` when its arguments, its settings or its destination are bad:
one line naming the problem, a non-zero exit, no traceback, nothing left behind."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ADMIN
from tests.http.support import issue, op


def run_cli(
    *args: str, env: dict[str, str], file_size_limit: int | None = None
) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        # A file size limit makes writes past it fail with EFBIG (once SIGXFSZ
        # is ignored), as a full disk makes them fail with ENOSPC.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        assert file_size_limit is not None
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run(
        [sys.executable, "-m", "syncd", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit if file_size_limit is not None else None,
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("syncd backup: "), done.stderr
    return done.stderr


def test_bad_urls_and_bind_are_named(tmp_path: Path) -> None:
    env = {**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN}
    dest = tmp_path / "copy"
    for url, words in [
        ("notaurl", "expected http://host:port"),
        ("ftp://127.0.0.1:1", "expected http://host:port"),
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://127.0.0.1:99999", "Port out of range"),
    ]:
        done = run_cli("backup", str(dest), "--url", url, env=env)
        assert done.returncode == 2 and f"--url {url!r}" in one_line(done) and words in done.stderr
        assert not dest.exists()
    done = run_cli("backup", str(dest), env={**env, "SERVICE_BIND": "garbage"})
    assert done.returncode == 2 and "SERVICE_BIND 'garbage'" in one_line(done)
    assert not dest.exists()


def test_a_destination_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    env = {**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN}
    a_file = tmp_path / "file"
    a_file.write_text("x")
    done = run_cli("backup", str(a_file / "copy"), "--url", "http://127.0.0.1:1", env=env)
    assert done.returncode == 2 and f"cannot create {a_file / 'copy'}" in one_line(done)


async def test_a_full_disk_is_named_and_leaves_nothing_behind(
    spawn_server: Any, tmp_path: Path
) -> None:
    server = spawn_server({})
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        await op(client, h, "lw:title", {"op": "set", "value": "x" * 4096})
    env = {**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN, "PYTHONDONTWRITEBYTECODE": "1"}
    dest = tmp_path / "copy"
    done = run_cli("backup", str(dest), "--url", server.url, env=env, file_size_limit=1024)
    assert done.returncode == 1 and "cannot write the copy into" in one_line(done)
    assert not dest.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    done = run_cli("backup", str(empty), "--url", server.url, env=env, file_size_limit=1024)
    assert done.returncode == 1 and "cannot write the copy into" in one_line(done)
    assert list(empty.iterdir()) == []
    # Without the limit the same backup goes through.
    done = run_cli("backup", str(dest), "--url", server.url, env=env)
    assert done.returncode == 0, done.stderr
