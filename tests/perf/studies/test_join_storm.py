"""perf.studies.join_storm at a tiny size: it seeds a document, storms it with
fresh providers, and finds every joiner synced with the exact document (the
check its figures rest on). Needs Node and npm: the study installs the Node
peers itself on first use (``npm ci`` in perf/peers/yjs, from its lock file),
so a clean checkout runs it too."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(
    shutil.which("node") is None or shutil.which("npm") is None, reason="needs Node and npm"
)
def test_every_joiner_of_a_small_storm_gets_the_exact_document(tmp_path: Path) -> None:
    out = tmp_path / "storm.json"
    args = ["--joiners", "8", "--doc-bytes", "300000", "--rounds", "1", "--servers", "syncd"]
    result = subprocess.run(
        [sys.executable, "-m", "perf.studies.join_storm", *args, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = json.loads(out.read_text())["runs"]
    assert run["synced"] == run["exact"] == 8, run
    # The server's encoding of the same document may be smaller than the seed's
    # (Yrs squashes what the updates split), never much.
    assert run["doc_bytes"] >= 200_000 and run["peak_mb"] > 0 and run["cpu_s"] >= 0
