"""``syncd verify`` on a data directory where a directory stands under the name
of a snapshot or a history file: that name in the report (exit 1), each
problem once, never an IsADirectoryError traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.http.support import issue, op


@pytest.mark.parametrize(
    "name", ["snapshots/snapshot-00000000000000000050.snap", "history/00000000000000000099.hist"]
)
async def test_a_directory_in_a_files_place_is_named(
    spawn_server: Any, tmp_path: Path, name: str
) -> None:
    server = spawn_server({})
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        await op(client, h, "lw:title", {"op": "set", "value": "kept"})
    data = tmp_path / "data"
    (data / name).mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "syncd", "verify", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1
    problems = [line for line in done.stdout.splitlines() if "problem:" in line]
    assert problems == [f"  problem: {data / name}: Is a directory"], done.stdout
