"""``scripts/check-prerequisites.sh``: `make test` stops at once, with one line per missing piece."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check-prerequisites.sh"


def run_with(
    tools: list[str], tmp_path: Path, pg_libdir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the script with only ``tools`` on PATH (plus what it needs to run at all)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ["ls", "sort", *tools]:
        found = shutil.which(tool)
        assert found, tool
        (bindir / tool).symlink_to(found)
    env = {"PATH": str(bindir), "SYNCD_PG_LIBDIR": str(pg_libdir or tmp_path / "no-postgres")}
    bash = shutil.which("bash")
    assert bash
    return subprocess.run([bash, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)


def test_passes_on_this_machine() -> None:
    result = subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, timeout=30, env=os.environ.copy()
    )
    assert result.returncode == 0, result.stderr


def test_missing_postgres_binaries_stop_with_one_line(tmp_path: Path) -> None:
    result = run_with(["node", "npm", "curl", "jq"], tmp_path)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert "PostgreSQL" in lines[0] and "apt-get install postgresql" in lines[0]


def test_finds_server_binaries_under_the_debian_layout(tmp_path: Path) -> None:
    libdir = tmp_path / "lib"
    for version in ("13", "15"):
        (libdir / version / "bin").mkdir(parents=True)
    for name in ("initdb", "pg_ctl"):
        tool = libdir / "15" / "bin" / name
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
    result = run_with(["node", "npm", "curl", "jq"], tmp_path, pg_libdir=libdir)
    assert result.returncode == 0, result.stderr


def test_missing_node_and_npm_are_named(tmp_path: Path) -> None:
    result = run_with([], tmp_path)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 5
    assert "PostgreSQL" in lines[0]
    assert lines[1].startswith("make test: Node.js is missing")
    assert lines[2].startswith("make test: npm is missing")
    assert lines[3].startswith("make test: curl is missing")
    assert lines[4].startswith("make test: jq is missing")
