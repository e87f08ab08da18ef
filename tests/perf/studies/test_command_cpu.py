"""perf.studies.command_cpu, one run of each row: every command ends as it
should (the study stops otherwise) and each row's figure is printed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from perf.studies.command_cpu import COMMANDS, SERVE_ROW

ROOT = Path(__file__).resolve().parents[3]


def test_every_command_runs_to_its_status_and_is_measured() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "perf.studies.command_cpu", "--repeat", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for row in [*COMMANDS, SERVE_ROW]:
        assert re.search(rf"^\| {re.escape(row)} \| \d+ \|$", result.stdout, re.M), result.stdout


def test_a_command_that_ends_otherwise_stops_the_study(tmp_path: Path) -> None:
    """A checkout whose syncd cannot be imported: its rows fail, and the
    study says which instead of printing a figure of nothing."""
    (tmp_path / "syncd").mkdir()
    (tmp_path / "syncd" / "__init__.py").write_text("raise ImportError('broken')\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "perf.studies.command_cpu",
            "--repeat",
            "1",
            "--code",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert f"with {tmp_path}: exit status" in result.stderr, result.stderr
