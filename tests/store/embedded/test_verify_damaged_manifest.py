"""``syncd verify`` on a backup whose manifest is damaged in ways json and the
file system calls refuse by raising: a report naming the manifest (exit 1),
never a traceback."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import httpx

from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS, issue, op


async def _backup(server: RunningServer, dest: Path) -> Path:
    """A real backup of ``server``, unpacked into ``dest``."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        await op(client, h, "pn:c", {"op": "increment", "amount": 1})
        answer = await client.post("/v1/admin/backup", headers=ADMIN_HEADERS)
        assert answer.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(answer.content)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def _verify(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "syncd", "verify", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_a_manifest_path_with_a_nul_is_named(server: RunningServer, tmp_path: Path) -> None:
    copy = await _backup(server, tmp_path / "copy")
    manifest = json.loads((copy / "MANIFEST.json").read_text())
    manifest["files"].append({"path": "log/a\u0000b", "bytes": 1, "sha256": "0"})
    (copy / "MANIFEST.json").write_text(json.dumps(manifest))
    done = _verify(copy)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1
    number = len(manifest["files"])
    assert f"MANIFEST.json: file {number}: 'log/a\\x00b' is not a path inside the backup" in (
        done.stdout
    )


async def test_a_manifest_nested_too_deeply_is_named(server: RunningServer, tmp_path: Path) -> None:
    copy = await _backup(server, tmp_path / "copy")
    depth = 100_000  # far past the json decoder's recursion
    (copy / "MANIFEST.json").write_text("[" * depth + "]" * depth)
    done = _verify(copy)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1
    assert "problem: MANIFEST.json: unreadable (nested too deeply)" in done.stdout
