"""perf.studies.idle_connections at a tiny size: every kind opened live on a
real server, counted by the server, measured; ``--compare`` runs two
checkouts (here the same one) alternately; counts beyond the file limit are
lowered to what fits, and said so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from perf.studies.idle_connections import FD_MARGIN, WARMUP_CONNECTIONS, fitting, summary

ROOT = Path(__file__).resolve().parents[3]


def test_every_kind_is_opened_and_measured_against_a_checkout(tmp_path: Path) -> None:
    out = tmp_path / "idle.json"
    args = ["--counts", "50", "--crdts", "5", "--settle", "0.1", "--compare", str(ROOT)]
    args += ["--json", str(out)]
    result = subprocess.run(
        [sys.executable, "-m", "perf.studies.idle_connections", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    runs = json.loads(out.read_text())["runs"]
    assert sorted((r["kind"], r["code"]) for r in runs) == sorted(
        (kind, code) for kind in ("ws", "yjs", "sse") for code in ("before", "after")
    )
    for r in runs:
        assert r["connections"] == 50 and r["rss_after"] > 0, r
        assert r["gauges"]["service_connections_open"] == WARMUP_CONNECTIONS + 50 + 1, r
    assert "after/before" in result.stdout


def test_counts_beyond_the_file_limit_are_lowered_to_what_fits() -> None:
    assert fitting([10_000], 20_000) == ([10_000], "")
    fits = 20_000 - WARMUP_CONNECTIONS - FD_MARGIN
    counts, note = fitting([10_000, 100_000], 20_000)
    assert counts == [10_000, fits]
    assert f"{fits:,}" in note and "RLIMIT_NOFILE" in note
    assert fitting([100_000, 200_000], 20_000)[0] == [fits]


def test_a_baseline_that_grew_by_nothing_gives_no_ratio_not_a_crash() -> None:
    # 50 connections may not move the RSS by a page: 0 bytes each before.
    runs = [
        {"kind": "sse", "connections": 50, "code": "before", "per_connection": 0.0},
        {"kind": "sse", "connections": 50, "code": "after", "per_connection": 327.0},
    ]
    text = summary(runs, ["before", "after"], ["sse"], [50])
    assert "n/a" in text and "0.32" in text
