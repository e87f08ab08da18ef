"""What the suite runs, and what each figure must reach: two tables, nothing else.

:data:`TARGETS` is the one table of targets. Each is a bound on one figure,
set by the issue that asked for it; the suite's adapters
(perf.suite.adapters) judge their rows against it, and the benchmarks print
their own summaries against the same entries, so a target is written once.

:data:`BENCHMARKS` names, in the order they run, the benchmarks of ``make
bench``: the module the suite starts as a child (``python -m MODULE ARGS
--json FILE``), its arguments for a full and for a ``--quick`` run, how long
it may take, the core an in-process benchmark is pinned to, and, for a
benchmark that needs something the machine may lack (wrk, a reachable
PostgreSQL), why it cannot run here. The adapter that turns a benchmark's
JSON into rows has the same name in perf.suite.adapters.

This module imports nothing that runs anything: a benchmark reads its target
here without pulling in the suite.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from perf.lib.servers import SERVER_CORE
from perf.lib.wrk import find_wrk

# -- targets ----------------------------------------------------------------------------

_COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "<": operator.lt,
}


@dataclass(frozen=True)
class Target:
    """A bound on one figure: ``op value unit``, e.g. ``>= 0.90x`` or ``<= 5 ms``."""

    op: Literal[">=", "<=", "<"]
    value: float
    unit: str
    """``x`` (a ratio to a peer), or a unit after a space (`` ms``) or none (``/s``)."""
    figure: str = ""
    """The statistic bound, when the row shows several (``p99``)."""

    def met(self, figure: float) -> bool:
        return _COMPARE[self.op](figure, self.value)

    def __str__(self) -> str:
        value = f"{self.value:.2f}" if self.unit == "x" else f"{self.value:,g}"
        bound = f"{self.op} {value}{self.unit}"
        return f"{self.figure} {bound}" if self.figure else bound


RGA_DOCUMENT_CHARS = 100_000
"""The document size the RGA memory target is set for: smaller ones are not judged."""

TARGETS: dict[str, Target] = {
    # HTTP (issues 2, 5 and 14): syncd over the peer measured in the same run
    "http.get-h11/bare-h11": Target(">=", 0.90, "x"),
    "http.increment-h11/bare-h11": Target(">=", 0.85, "x"),
    "http.increment-h11/starlette": Target(">=", 1.5, "x"),
    "http.increment-httptools/starlette": Target(">=", 3.0, "x"),
    "http.increment-httptools/raw-uvloop": Target(">=", 0.40, "x"),
    "http.batch-ops": Target(">=", 100_000, "/s"),
    "http.p99-at-half-peak": Target("<=", 5, " ms"),
    # Issue #35: server CPU per durable increment (httptools, wrk, fsync batch),
    # and how many times that the peers spend per request
    "http.increment-cpu": Target("<=", 21, " us"),
    "http.increment-cpu/same-work": Target(">=", 3.5, "x"),
    "http.increment-cpu/starlette": Target(">=", 2.0, "x"),
    # WebSocket
    "ws-ingest.ops": Target(">=", 20_000, "/s"),
    "ws-fanout.deliveries": Target(">=", 300_000, "/s"),
    "ws-fanout.p99": Target("<=", 50, " ms"),
    "ws-idle.per-connection": Target("<=", 20, " KB"),
    # The rga type on editing traces: against list splicing, and the memory of a
    # document of RGA_DOCUMENT_CHARS characters or more
    "rga.replay/list": Target("<=", 1.5, "x"),
    "rga.document": Target("<", 50, " MB"),
    # The store
    "durability.batch/never": Target(">=", 0.80, "x"),
    "restart.ready": Target("<=", 5, " s"),
    "pg.spread/embedded": Target(">=", 0.6, "x"),
    "pg.hot/embedded": Target(">=", 0.5, "x"),
    "pg.three-nodes/one": Target(">=", 1, "x"),
    "pg.cross-node-under-load": Target("<=", 10, " ms", figure="p99"),
    # Auth per request, warm token cache
    "auth.warm": Target("<=", 5, " us"),
}


# -- benchmarks -------------------------------------------------------------------------


@dataclass(frozen=True)
class Benchmark:
    module: str
    """Run as ``python -m MODULE ARGS --json FILE``; it writes its figures to FILE."""
    about: str
    full: tuple[str, ...]
    quick: tuple[str, ...]
    """Short durations and small sizes: checks the plumbing, not the figures."""
    timeout_s: float
    """A full run's limit; only a hung child reaches it."""
    core: str | None = None
    """Pin the child here: in-process benchmarks run on the server core."""
    unavailable: Callable[[], str | None] | None = None
    """Why the benchmark cannot run on this machine, or None when it can."""

    def args(self, quick: bool) -> list[str]:
        return list(self.quick if quick else self.full)


def _no_wrk() -> str | None:
    return None if find_wrk() else "wrk not installed (apt-get install -y wrk)"


def _pg_unreachable() -> str | None:
    """SYNCD_BENCH_PG names a server that does not answer (unset: a throw-away one is used)."""
    url = os.environ.get("SYNCD_BENCH_PG")
    if url is None:
        return None
    from perf.lib.postgres import unreachable

    why = unreachable(url)
    return f"PostgreSQL unreachable ({why})" if why else None


BENCHMARKS: dict[str, Benchmark] = {
    "http": Benchmark(
        "perf.bench.http_ops",
        "HTTP ops, single and batched, vs bare h11, raw uvloop, Starlette",
        full=("--duration", "5", "--connections", "32"),
        quick=("--duration", "0.5", "--connections", "8"),
        timeout_s=900,
    ),
    "http-wrk": Benchmark(
        "perf.bench.http_wrk",
        "the same HTTP servers measured with wrk (C, one thread)",
        # 50 connections, as issue #35 measured the CPU per request: with
        # fewer, group commits are smaller and each op carries more of one.
        full=("--duration", "5", "--connections", "50", "--warmup", "1"),
        quick=("--duration", "1", "--connections", "8", "--warmup", "0"),
        timeout_s=900,
        unavailable=_no_wrk,
    ),
    "ws-ingest": Benchmark(
        "perf.bench.ws_ingest",
        "WebSocket ingest, acked durable ops/s",
        full=("--duration", "10"),
        quick=("--duration", "1", "--warmup", "0.5"),
        timeout_s=300,
    ),
    "ws-fanout": Benchmark(
        "perf.bench.ws_fanout",
        "WebSocket fan-out to 1000 subscribers",
        full=("--subscribers", "1000", "--duration", "10"),
        quick=("--subscribers", "50", "--duration", "1", "--warmup", "0.5"),
        timeout_s=300,
    ),
    "ws-idle": Benchmark(
        "perf.bench.ws_idle",
        "10k idle WebSocket connections, RSS each",
        full=("--connections", "10000"),
        quick=("--connections", "200"),
        timeout_s=600,
    ),
    "rga": Benchmark(
        "perf.bench.rga_peers",
        "editing traces: rga vs list splicing vs pycrdt",
        full=("--repeat", "3", "--pycrdt-repeat", "1"),
        quick=("--max-patches", "1000", "--repeat", "1", "--min-chars", "2000"),
        timeout_s=1800,
        core=SERVER_CORE,
    ),
    "durability": Benchmark(
        "perf.bench.durability",
        "50 HTTP writers, fsync=batch vs never",
        full=("--writers", "50", "--duration", "5", "--rounds", "2"),
        quick=("--writers", "8", "--duration", "0.5", "--warmup", "0.3", "--rounds", "1"),
        timeout_s=600,
    ),
    "restart": Benchmark(
        "perf.bench.restart",
        "restart time, 1M ops over 10k CRDTs",
        full=("--ops", "1000000", "--crdts", "10000", "--repeat", "3"),
        quick=("--ops", "20000", "--crdts", "200", "--repeat", "1"),
        timeout_s=1800,
    ),
    "pg": Benchmark(
        "perf.bench.pg_store",
        "PostgreSQL store and cross-node latency",
        full=(),
        quick=("--ops", "200", "--samples", "15", "--load-seconds", "2"),
        timeout_s=900,
        unavailable=_pg_unreachable,
    ),
    "auth": Benchmark(
        "perf.bench.auth_cost",
        "auth cost per request",
        full=("--n", "200000"),
        quick=("--n", "5000"),
        timeout_s=300,
        core=SERVER_CORE,
    ),
}


def normalize(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def select(only: str | None) -> list[str]:
    """The benchmarks named in ``only`` (comma-separated), in the suite's order; all for None."""
    if not only:
        return list(BENCHMARKS)
    names = [normalize(n) for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; choose from {', '.join(BENCHMARKS)}")
    return [n for n in BENCHMARKS if n in names]
