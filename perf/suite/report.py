"""The suite's table: rows, their cells, and the Markdown report (perf/RESULTS.md).

A :class:`Row` is one line of the table: the workload, syncd's figure, the
peer measured in the same run and its figure, the ratio, the target, whether
it was met, and the load generator with its CPU use (a generator above
:data:`SATURATED` of its core measures itself, not the server, and is marked
so). The same rows are printed to the console at the end of a run and
written, with the machine they ran on, as perf/RESULTS.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perf.lib.servers import ROOT
from perf.lib.table import table
from perf.lib.wrk import WRK_THREADS

RESULTS = ROOT / "perf" / "RESULTS.md"
"""Where a full run writes its report."""
SATURATED = 0.90
"""Generator CPU (fraction of its core) above which its figure is its own limit."""

HEADER = ("workload", "syncd", "peer", "peer figure", "ratio", "target", "met", "generator")


@dataclass
class Row:
    workload: str
    syncd: str
    peer: str = ""
    peer_figure: str = ""
    ratio: str = ""
    target: str = ""
    met: str = ""
    """"yes", "NO", or empty where there is no target (or no figure)."""
    generator: str = ""
    """The load generator and its CPU use, or why there is none."""


def cells(row: Row) -> tuple[str, ...]:
    return tuple(str(v) for v in dataclasses.astuple(row))


def met(ok: bool) -> str:
    return "yes" if ok else "NO"


def rate(value: float, unit: str = "/s") -> str:
    return f"{value:,.0f}{unit}"


def gen_note(kind: str, *cpus: float | None) -> str:
    """``loadgen 45%`` (one run) or ``loadgen 45% / 80%`` (syncd's run / the peer's)."""
    shown = [f"{c:.0%}" for c in cpus if c is not None]
    note = f"{kind} {' / '.join(shown)}" if shown else kind
    if any(c is not None and c > SATURATED for c in cpus):
        note += " SATURATED"
    return note


def console_table(rows: Sequence[Row]) -> str:
    return table([cells(r) for r in rows], HEADER)


def markdown_table(rows: Sequence[Row]) -> str:
    def esc(s: str) -> str:
        return s.replace("|", "\\|")

    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(esc(c) for c in cells(r)) + " |" for r in rows]
    return "\n".join(lines)


def cpu_index_text(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "not measured"


def duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} minutes" if seconds >= 120 else f"{seconds:.0f} s"


def results_markdown(report: dict[str, Any]) -> str:
    """perf/RESULTS.md from a run's report (what ``--json`` writes)."""
    m = report["machine"]
    errors = report["errors"]
    out = [
        "# Benchmark results",
        "",
        f"Written by `{report['command']}` (`make bench`) on {report['started']} UTC,"
        f" commit {report['commit']}; the run took {duration(report['seconds'])}.",
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu']}, {m['cores']} cores; memory {m['memory_gib']} GiB",
        f"- Kernel: {m['kernel']}; Python {m['python']}; wrk: {m['wrk'] or 'not installed'}",
        f"- Load average (1, 5, 15 min) at the start: {report['load_start']};"
        f" at the end: {report['load_end']}",
        f"- Servers pinned to core {m['server_core']}, load generators to core {m['load_core']}.",
        f"- CPU speed index (`python -m perf.suite.cpu_index` on the server core, microseconds;"
        f" lower is faster) at the start: {cpu_index_text(report.get('cpu_index_start'))};"
        f" at the end: {cpu_index_text(report.get('cpu_index_end'))}. The same code's figures"
        " move with it: compare two runs only next to their indexes.",
        "",
        "**This machine is shared.** Other work may run on the same two cores during a run"
        " (the load averages above say how much did), so every figure here is noisy and"
        " may be lower than the same code would give on a quiet machine; the peers were"
        " measured in the same run under the same conditions, which keeps the ratios more"
        " meaningful than the absolute numbers.",
        "",
        "## Results",
        "",
        markdown_table([Row(**r) for r in report["rows"]]),
        "",
        "## Reading the table",
        "",
        "- *ratio* is syncd's figure over the peer's, in the row's unit (for times, a ratio"
        " above 1 means syncd is slower).",
        "- *generator* is what drove the load and its CPU use as a share of its core"
        " (`a / b`: syncd's run / the peer's run); above"
        f" {SATURATED:.0%} it is marked SATURATED: that figure is the generator's limit, not"
        " the server's. `loadgen` is perf.lib.loadgen (Python, uvloop, one process on the load"
        f" core); `wrk -t{WRK_THREADS}` is wrk with one thread on the load core.",
        "- HTTP rows with wrk repeat the loadgen rows with a generator that is not the"
        " bottleneck for the fixed-response peers; the p99 at half peak needs an open-loop"
        " generator and is measured with loadgen only.",
        "- Each benchmark is `python -m perf.bench.<module>`; see the module docstrings for"
        " the method, [README.md](README.md) for the suite, and `python -m perf --json PATH`"
        " for every raw figure. The targets are the table in perf/suite/registry.py.",
        "- Every target marked NO has a profile (`make profile BENCH=<name> FORMAT=raw`) and"
        " an account of where its time goes in [profiles/README.md](profiles/README.md).",
    ]
    if errors:
        out += ["", "## Failures", ""]
        out += [f"- `{name}`: {msg}" for name, msg in errors.items()]
    return "\n".join(out) + "\n"
