"""Running the suite: each benchmark as a child process, its JSON through its adapter.

Every benchmark runs as ``python -m MODULE ARGS --json FILE`` (the module
and arguments from perf.suite.registry) and starts its own fresh server(s),
so one benchmark's state, memory or crash cannot leak into the next; an
in-process benchmark's child is pinned to the server core. What the child
wrote goes through its adapter (perf.suite.adapters) into rows. A benchmark
that cannot run on this machine (no wrk, an unreachable PostgreSQL) gives
one "skipped" row saying why; one that fails gives a "FAILED" row and is
listed under the report's failures, and the run goes on with the next.

Around the benchmarks the machine is described (perf.suite.machine) and its
load and speed measured at the start and at the end. The report, a dict,
is written as JSON (``--json``) and as Markdown (perf.suite.report).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from perf.lib.servers import ROOT, pinned
from perf.suite import machine
from perf.suite.adapters import ADAPTERS
from perf.suite.registry import BENCHMARKS, Benchmark
from perf.suite.report import Row, console_table, cpu_index_text, results_markdown

Log = Callable[[str], None]


def run_child(bench: Benchmark, quick: bool, tmp: Path, log: Log) -> Any:
    """Run ``python -m module args --json FILE`` and return what it wrote."""
    out = tmp / f"{bench.module.rsplit('.', 1)[-1]}-{time.monotonic_ns()}.json"
    cmd = [sys.executable, "-m", bench.module, *bench.args(quick), "--json", str(out)]
    if bench.core is not None:
        cmd = pinned(cmd, bench.core)
    log(f"$ {' '.join(cmd)}")
    sys.stdout.flush()
    proc = subprocess.run(cmd, cwd=ROOT, timeout=bench.timeout_s, check=False)
    if not out.exists():
        raise RuntimeError(f"{bench.module} exited with {proc.returncode} and wrote no results")
    result = json.loads(out.read_text())
    if proc.returncode != 0:
        result = {"_exit": proc.returncode, **result} if isinstance(result, dict) else result
    return result


def run_suite(
    names: Sequence[str],
    *,
    quick: bool,
    json_path: str | None,
    results_path: str | None,
    command: str,
    log: Log = print,
) -> dict[str, Any]:
    """Run the named benchmarks in turn; the report (also written where asked)."""
    started = time.time()
    report: dict[str, Any] = {
        "command": command,
        "started": datetime.datetime.fromtimestamp(started, datetime.UTC).strftime(
            "%Y-%m-%d %H:%M"
        ),
        "commit": machine.git_commit(),
        "quick": quick,
        "benchmarks": list(names),
        "machine": machine.describe(),
        "load_start": machine.load_average(),
        "cpu_index_start": machine.cpu_index(),
    }
    rows: list[Row] = []
    errors: dict[str, str] = {}
    raw: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="syncd-suite-") as tmp:
        for name in names:
            bench = BENCHMARKS[name]
            log(f"\n== {name}: {bench.about}")
            t0 = time.monotonic()
            why = bench.unavailable() if bench.unavailable is not None else None
            if why is not None:
                log(f"   skipped: {why}")
                rows.append(Row(bench.about, "skipped", generator=why))
                continue
            try:
                raw[name] = result = run_child(bench, quick, Path(tmp), log)
                rows += ADAPTERS[name](result)
            except Exception as exc:
                msg = f"{type(exc).__name__}: {exc}"
                errors[name] = msg
                rows.append(Row(name, "FAILED", generator=msg[:120]))
            log(f"   ({time.monotonic() - t0:.0f} s)")
    report["raw"] = raw
    report["load_end"] = machine.load_average()
    report["cpu_index_end"] = machine.cpu_index()
    report["seconds"] = time.time() - started
    report["rows"] = [dataclasses.asdict(r) for r in rows]
    report["errors"] = errors
    log("")
    log(console_table(rows))
    log(f"\nload average at the start {report['load_start']}, at the end {report['load_end']}")
    log(
        f"cpu index at the start {cpu_index_text(report['cpu_index_start'])} us,"
        f" at the end {cpu_index_text(report['cpu_index_end'])} us"
    )
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2) + "\n")
        log(f"JSON: {json_path}")
    if results_path:
        Path(results_path).write_text(results_markdown(report))
        log(f"Markdown: {results_path}")
    return report
