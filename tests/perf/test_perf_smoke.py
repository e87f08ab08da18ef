"""The benchmark suite's plumbing on tiny sizes, so the scripts cannot silently rot.

The figures of a quick run mean nothing; what is checked is that every stage
runs (child processes, JSON hand-over, rows, the Markdown report) and that
the parsers of the generators' output read what the tools print.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perf.suite import Row, markdown_table, parse_wrk, select

ROOT = Path(__file__).resolve().parents[2]
QUICK_TIMEOUT_S = 60
"""The quick run takes a few seconds; this only stops a hung child."""

WRK_OUTPUT = """\
Running 5s test @ http://127.0.0.1:40000/health/live
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.05ms  312.00us   9.80ms   91.00%
    Req/Sec    30.51k     1.20k   32.10k    80.00%
  Latency Distribution
     50%  990.00us
     75%    1.10ms
     90%    1.30ms
     99%    2.50ms
  151800 requests in 5.00s, 20.27MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec:  30360.12
Transfer/sec:      4.05MB
"""


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
    assert report["benchmarks"] == ["rga", "auth"]
    assert report["errors"] == {}
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


def test_cli_lists_benchmarks_and_refuses_unknown_names(capsys: pytest.CaptureFixture[str]) -> None:
    from perf.__main__ import main

    assert main(["--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == select(None)
    # Refused before anything runs.
    with pytest.raises(SystemExit, match="unknown benchmark"):
        main(["--quick", "--only", "rga,nope"])


def test_select_keeps_suite_order_and_accepts_underscores() -> None:
    assert select("auth,ws_ingest,http") == ["http", "ws-ingest", "auth"]
    assert select(None)[0] == "http"
    with pytest.raises(SystemExit, match="unknown benchmark"):
        select("rga,warp")


def test_parse_wrk_reads_rate_latency_and_errors() -> None:
    r = parse_wrk(WRK_OUTPUT)
    assert r["rps"] == pytest.approx(30360.12)
    assert r["p50_ms"] == pytest.approx(0.99)
    assert r["p99_ms"] == pytest.approx(2.5)
    assert r["non_2xx"] == 7
    assert r["socket_errors"] == 3


def test_parse_wrk_without_a_rate_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="Requests/sec"):
        parse_wrk("unable to connect to 127.0.0.1:1 Connection refused\n")


def test_markdown_table_escapes_pipes() -> None:
    table = markdown_table([Row("a|b", "1/s", target=">= 2x")])
    assert table.splitlines()[2] == "| a\\|b | 1/s |  |  |  | >= 2x |  |  |"


def test_failures_counts_every_non_200_answer() -> None:
    from perf.suite import failures

    assert failures({"statuses": {"200": 10}}, None) == ""
    assert failures({"statuses": {"200": 5, "429": 3}}, {"non_2xx": 2, "socket_errors": 1}) == (
        "; 6 errors"
    )
