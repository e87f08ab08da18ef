"""perf.studies.revert at a tiny size: it builds both documents, reverts the
agent on a real server, and finds the text equal to the replica that never
saw the agent (the check its figures rest on)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_study_reverts_both_documents_to_the_replica_without_the_agent(
    tmp_path: Path,
) -> None:
    out = tmp_path / "revert.json"
    args = ["--ops", "600", "--agent-ops", "30", "--span", "200", "--repeat", "1"]
    result = subprocess.run(
        [sys.executable, "-m", "perf.studies.revert", *args, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(out.read_text())
    assert [f["document"] for f in figures] == ["rga", "ydoc"]
    for f in figures:
        assert f["equals_replica_without_agent"] is True, f
        assert f["matched"] == 30 and f["applied"] >= 1 and f["revert_ms_median"] > 0
