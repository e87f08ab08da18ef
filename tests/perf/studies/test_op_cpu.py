"""perf.studies.op_cpu at a tiny size: syncd's three workloads and the three
peers answered (every answer a 200, the same-work peer's included) and were
measured; ``--compare`` runs two checkouts (here the same one) alternately."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perf.lib.wrk import find_wrk

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(find_wrk() is None, reason="wrk is not installed")
def test_syncd_and_the_peers_are_measured_per_request(tmp_path: Path) -> None:
    out = tmp_path / "op_cpu.json"
    args = ["--rounds", "1", "--duration", "1", "--warmup", "0", "--connections", "8"]
    args += ["--window", "50", "--compare", str(ROOT), "--json", str(out)]
    result = subprocess.run(
        [sys.executable, "-m", "perf.studies.op_cpu", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    runs = json.loads(out.read_text())["runs"]
    assert sorted(r["code"] for r in runs) == ["after", "before", "peers"]
    for r in runs:
        if r["code"] == "peers":
            figures = [
                r[name] for name in ("raw uvloop", "starlette in memory", "starlette same work")
            ]
        else:
            figures = [r["op"], r["batch"]]
            assert r["ws"]["errors"] == 0 and r["ws"]["us_per_op"] > 0, r["ws"]
        for f in figures:
            assert f["requests"] > 0 and f["non_2xx"] == 0 and f["us_per_request"] > 0, f
    assert "after / before" in result.stdout and "starlette same work" in result.stdout
