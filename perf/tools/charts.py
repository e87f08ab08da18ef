"""PNG charts of benchmark results, for docs/benchmarks.md.

Usage::

    python -m perf.bench.http_ops --json results.json
    python -m perf.tools.charts results.json [more.json ...] [--out docs/img]

A results file is what ``perf.bench.http_ops --json`` writes: workload name ->
either a load generator result (``{"rps", "p50_ms", "p99_ms", ...}``) or a
derived figure (a number, named ``"<server>: <figure>"``, e.g.
``"syncd (h11): batched ops/s"``). Several files become several series (one
per file, labelled by its name), e.g. two machines or before/after a change.

Writes, into ``--out``:

- ``http-throughput.png``: requests per second per workload, syncd beside its peers;
- ``http-latency.png``: p50 and p99 latency per workload;
- ``http-derived.png``: the derived figures, one panel per figure name.

Needs matplotlib (the ``bench`` extra); the parsing half does not.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perf.lib.servers import ROOT

DEFAULT_OUT = ROOT / "docs" / "img"
SYNCD_COLOR = "#2f6db5"
PEER_COLOR = "#9aa5b1"
SERIES_COLORS = ("#2f6db5", "#d9822b", "#3a9a5b", "#b5402f", "#7a4fb5")
OPEN_LOOP_MARK = " @ "
DPI = 120
"""Sharp enough on a high-density screen, small enough to keep in git."""


@dataclass(frozen=True)
class Workload:
    name: str
    rps: float
    p50_ms: float | None
    p99_ms: float | None

    @property
    def is_syncd(self) -> bool:
        return self.name.startswith("syncd")


@dataclass(frozen=True)
class Series:
    label: str
    workloads: list[Workload]
    derived: dict[str, dict[str, float]]
    """figure name -> {server: value}."""


def parse(label: str, results: dict[str, Any]) -> Series:
    """One results map as a series; unknown shapes are skipped, not fatal."""
    workloads: list[Workload] = []
    derived: dict[str, dict[str, float]] = {}
    for name, value in results.items():
        if isinstance(value, dict) and isinstance(value.get("rps"), int | float):
            workloads.append(
                Workload(
                    name, float(value["rps"]), _opt(value.get("p50_ms")), _opt(value.get("p99_ms"))
                )
            )
        elif isinstance(value, int | float) and not isinstance(value, bool):
            server, sep, figure = name.rpartition(": ")
            derived.setdefault(figure if sep else name, {})[server if sep else label] = float(value)
    return Series(label, workloads, derived)


def _opt(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def load(paths: Sequence[Path]) -> list[Series]:
    series = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict):
            raise SystemExit(f"{path}: expected a JSON object of workloads")
        series.append(parse(path.stem, data))
    return series


def workload_names(series: Sequence[Series]) -> list[str]:
    """Every workload in first-seen order, peers first within the first series' order."""
    names: list[str] = []
    for s in series:
        for w in s.workloads:
            if w.name not in names:
                names.append(w.name)
    return names


# --- drawing ------------------------------------------------------------------


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("perf.tools.charts needs matplotlib: pip install -e '.[bench]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _bar_rows(ax: Any, names: list[str], series: Sequence[Series], value: str, unit: str) -> None:
    height = 0.8 / max(1, len(series))
    for i, s in enumerate(series):
        by_name = {w.name: w for w in s.workloads}
        ys, xs, colors = [], [], []
        for row, name in enumerate(names):
            w = by_name.get(name)
            figure = getattr(w, value) if w is not None else None
            if figure is None:
                continue
            ys.append(row + i * height - 0.4 + height / 2)
            xs.append(figure)
            if len(series) == 1:
                colors.append(SYNCD_COLOR if w is not None and w.is_syncd else PEER_COLOR)
            else:
                colors.append(SERIES_COLORS[i % len(SERIES_COLORS)])
        bars = ax.barh(ys, xs, height=height, color=colors, label=s.label)
        ax.bar_label(bars, labels=[_fmt(x, unit) for x in xs], padding=3, fontsize=7)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    if not ax.yaxis_inverted():  # axes sharing y share the inversion too
        ax.invert_yaxis()
    ax.margins(x=0.18)
    ax.grid(axis="x", alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)


def _fmt(x: float, unit: str) -> str:
    if unit == "ms":
        return f"{x:.2f} ms"
    if x >= 10_000:
        return f"{x / 1000:.0f}k"
    return f"{x:.0f}"


def throughput_chart(series: Sequence[Series], out: Path) -> Path | None:
    # Open-loop runs ("@ half peak") go at a set rate: their req/s is the
    # setting, not a capacity, so they belong on the latency chart only.
    names = [n for n in workload_names(series) if OPEN_LOOP_MARK not in n]
    if not names:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(names) + 1.2))
    _bar_rows(ax, names, series, "rps", "req/s")
    ax.set_xlabel("requests per second (closed loop, higher is better)")
    ax.set_title("HTTP throughput: syncd (blue) and peers measured in the same run", fontsize=10)
    return _save(plt, fig, out / "http-throughput.png")


def latency_chart(series: Sequence[Series], out: Path) -> Path | None:
    names = [
        n
        for n in workload_names(series)
        if any(w.name == n and w.p99_ms is not None for s in series for w in s.workloads)
    ]
    if not names:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.35 * len(names) + 1.2), sharey=True)
    for ax, value, title in (
        (axes[0], "p50_ms", "p50 latency"),
        (axes[1], "p99_ms", "p99 latency"),
    ):
        _bar_rows(ax, names, series, value, "ms")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("ms (lower is better)")
    fig.suptitle("HTTP latency per request", fontsize=10)
    return _save(plt, fig, out / "http-latency.png")


def derived_chart(series: Sequence[Series], out: Path) -> Path | None:
    figures: list[str] = []
    for s in series:
        for name in s.derived:
            if name not in figures:
                figures.append(name)
    if not figures:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(figures), figsize=(4.5 * len(figures), 2.6), squeeze=False)
    for ax, figure in zip(axes[0], figures, strict=True):
        servers: list[str] = []
        for s in series:
            servers += [k for k in s.derived.get(figure, {}) if k not in servers]
        unit = "ms" if "p99" in figure or "ms" in figure else ""
        height = 0.8 / max(1, len(series))
        for i, s in enumerate(series):
            values = s.derived.get(figure, {})
            rows = [(row, values[k]) for row, k in enumerate(servers) if k in values]
            bars = ax.barh(
                [row + i * height - 0.4 + height / 2 for row, _ in rows],
                [v for _, v in rows],
                height=height,
                color=SERIES_COLORS[i % len(SERIES_COLORS)],
                label=s.label,
            )
            ax.bar_label(bars, labels=[_fmt(v, unit) for _, v in rows], padding=3, fontsize=7)
        ax.set_yticks(range(len(servers)), servers, fontsize=8)
        ax.invert_yaxis()
        ax.margins(x=0.25)
        ax.set_title(figure, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        if len(series) > 1:
            ax.legend(fontsize=8)
    return _save(plt, fig, out / "http-derived.png")


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    # No timestamp or version in the file: regenerating unchanged data changes nothing.
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m perf.tools.charts", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "results", nargs="+", type=Path, help="results JSON (perf.bench.http_ops --json)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"default {DEFAULT_OUT}")
    args = parser.parse_args(argv)
    series = load(args.results)
    written = [
        p
        for p in (
            throughput_chart(series, args.out),
            latency_chart(series, args.out),
            derived_chart(series, args.out),
        )
        if p is not None
    ]
    if not written:
        print("no workloads found in the results", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
