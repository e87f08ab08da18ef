"""perf.studies.replay_cpu at a tiny size: a real node on a throw-away
PostgreSQL takes other nodes' notifications, applies every record (the study
checks each CRDT's seq) and the figure is printed, with and without
subscribers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("extra", [[], ["--subscribed"]])
def test_the_study_applies_every_record_and_prints_the_cpu_per_op(extra: list[str]) -> None:
    args = ["--crdts", "4", "--records", "300", "--per-commit", "16", "--repeat", "2", *extra]
    result = subprocess.run(
        [sys.executable, "-m", "perf.studies.replay_cpu", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    found = re.search(r"CPU per remote op: median ([\d.]+) us", result.stdout)
    assert found is not None, result.stdout
    assert 0 < float(found.group(1)) < 10_000
    assert ("a subscriber on each" in result.stdout) == bool(extra)
