"""The registry: one table of targets, every benchmark runnable and adapted, selection by name."""

from __future__ import annotations

import importlib.util

import pytest

from perf.suite.adapters import ADAPTERS
from perf.suite.registry import BENCHMARKS, TARGETS, Target, select


def test_every_benchmark_has_its_adapter_and_module() -> None:
    assert list(ADAPTERS) == list(BENCHMARKS)
    for name, bench in BENCHMARKS.items():
        assert importlib.util.find_spec(bench.module) is not None, name
        assert bench.module.startswith("perf.bench."), (
            "the suite runs the benchmarks of perf/bench/"
        )
        assert bench.timeout_s > 0 and bench.about


def test_quick_and_full_runs_differ_and_leave_json_to_the_driver() -> None:
    for name, bench in BENCHMARKS.items():
        assert "--json" not in bench.args(True) + bench.args(False), name
        if bench.full:
            assert bench.args(True) != bench.args(False), f"{name}: --quick changes nothing"


@pytest.mark.parametrize(
    ("target", "text", "inside", "outside"),
    [
        (Target(">=", 0.9, "x"), ">= 0.90x", 0.9, 0.89),
        (Target(">=", 100_000, "/s"), ">= 100,000/s", 100_000, 99_999),
        (Target("<=", 5, " ms"), "<= 5 ms", 5, 5.01),
        (Target("<", 50, " MB"), "< 50 MB", 49.9, 50),
        (Target("<=", 10, " ms", figure="p99"), "p99 <= 10 ms", 10, 10.5),
    ],
)
def test_a_target_reads_as_written_and_judges_its_bound(
    target: Target, text: str, inside: float, outside: float
) -> None:
    assert str(target) == text
    assert target.met(inside)
    assert not target.met(outside)


def test_targets_are_keyed_by_benchmark() -> None:
    for key in TARGETS:
        assert key.split(".", 1)[0] in BENCHMARKS, key


def test_select_keeps_suite_order_and_accepts_underscores() -> None:
    assert select("auth,ws_ingest,http") == ["http", "ws-ingest", "auth"]
    assert select(None)[0] == "http"
    with pytest.raises(SystemExit, match="unknown benchmark"):
        select("rga,warp")
