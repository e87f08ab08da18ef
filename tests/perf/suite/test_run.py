"""The benchmark suite's plumbing on tiny sizes, so the scripts cannot silently rot.

The figures of a quick run mean nothing; what is checked is that every stage
runs (child processes, JSON hand-over, adapters, rows, the Markdown report)
through both entry points, ``python -m perf`` and ``python -m perf.suite``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from perf.suite.registry import select

ROOT = Path(__file__).resolve().parents[3]
QUICK_TIMEOUT_S = 60
"""The quick run takes a few seconds; this only stops a hung child."""


def test_quick_suite_writes_rows_json_and_markdown(tmp_path: Path) -> None:
    from perf.lib.traces import default_traces

    assert list(default_traces().glob("*.json.gz")), f"no editing traces in {default_traces()}"
    out_json = tmp_path / "results.json"
    out_md = tmp_path / "RESULTS.md"
    cmd = [sys.executable, "-m", "perf", "--quick", "--only", "rga,auth"]
    cmd += ["--json", str(out_json), "--results", str(out_md)]
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=QUICK_TIMEOUT_S, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    report = json.loads(out_json.read_text())
    assert report["command"].startswith("python -m perf --quick")
    assert report["benchmarks"] == ["rga", "auth"]
    assert report["errors"] == {}
    assert set(report["raw"]) == {"rga", "auth"}
    rows = report["rows"]
    assert all("FAILED" not in r["syncd"] for r in rows)
    workloads = [r["workload"] for r in rows]
    for trace in ("sveltecomponent", "rustcode", "seph-blog1"):
        assert any(w.startswith(f"RGA replay {trace}") for w in workloads), workloads
    assert any(w.startswith("RGA concurrent replay friendsforever") for w in workloads)
    assert any(r["peer"] == "list splicing" and r["ratio"].endswith("x") for r in rows)
    assert any(r["peer"].startswith("pycrdt") for r in rows)
    warm = next(r for r in rows if r["workload"].startswith("Auth per request, warm"))
    assert warm["target"] == "<= 5 us" and warm["met"] in ("yes", "NO")
    assert not any("WRONG TEXT" in r["syncd"] + r["peer_figure"] for r in rows)

    md = out_md.read_text()
    assert "## Machine" in md and "shared" in md
    assert "| workload | syncd | peer |" in md
    assert report["machine"]["cores"] >= 1
    # The machine's speed at both ends of the run, so runs can be compared.
    assert 0 < report["cpu_index_start"] < 1000 and 0 < report["cpu_index_end"] < 1000
    assert f"at the start: {report['cpu_index_start']:.2f}" in md
    # The table printed at the end carries the same rows.
    assert "RGA replay rustcode" in proc.stdout


def test_a_benchmark_that_cannot_run_here_is_one_skipped_row(tmp_path: Path) -> None:
    """SYNCD_BENCH_PG naming a server that refuses: a row says why, and the run succeeds."""
    out_json = tmp_path / "results.json"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens once the socket is closed
    cmd = [sys.executable, "-m", "perf.suite", "--quick", "--only", "pg", "--json", str(out_json)]
    env = {**os.environ, "SYNCD_BENCH_PG": f"postgresql://nobody@127.0.0.1:{port}"}
    proc = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=QUICK_TIMEOUT_S
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out_json.read_text())
    assert report["command"].startswith("python -m perf.suite --quick")
    assert report["errors"] == {} and report["raw"] == {}
    [row] = report["rows"]
    assert row["syncd"] == "skipped"
    assert row["generator"].startswith("PostgreSQL unreachable (")


def test_cli_lists_benchmarks_and_refuses_unknown_names(capsys: pytest.CaptureFixture[str]) -> None:
    from perf.suite.__main__ import main

    assert main(["--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == select(None)
    # Refused before anything runs.
    with pytest.raises(SystemExit, match="unknown benchmark"):
        main(["--quick", "--only", "rga,nope"])
