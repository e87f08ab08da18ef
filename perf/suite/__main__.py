"""``python -m perf`` or ``python -m perf.suite`` (``make bench``): every benchmark, its peers, one table.

Options: ``--quick`` (short runs and small sizes: checks the plumbing, not
the figures), ``--only a,b`` (some benchmarks; names below), ``--json PATH``
(every figure, machine-readable), ``--results PATH`` (the Markdown report;
a full run writes perf/RESULTS.md unless told otherwise, a quick one writes
none unless told). ``--list`` names the benchmarks.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from perf.suite.driver import run_suite
from perf.suite.registry import BENCHMARKS, select
from perf.suite.report import RESULTS


def main(argv: list[str] | None = None, prog: str = "python -m perf.suite") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short durations, small sizes")
    parser.add_argument("--only", help=f"comma-separated, from: {', '.join(BENCHMARKS)}")
    parser.add_argument("--json", help="write every figure to this file")
    parser.add_argument(
        "--results",
        help=f"write the Markdown report here (default: {RESULTS.relative_to(RESULTS.parents[1])}"
        " for a full run, nothing for --quick)",
    )
    parser.add_argument("--list", action="store_true", help="name the benchmarks and stop")
    args = parser.parse_args(argv)
    if args.list:
        for name, bench in BENCHMARKS.items():
            print(f"{name:<12} {bench.about}")
        return 0
    names = select(args.only)
    results = args.results or (None if args.quick else str(RESULTS))
    command = shlex.join([*shlex.split(prog), *(sys.argv[1:] if argv is None else argv)])
    report = run_suite(
        names, quick=args.quick, json_path=args.json, results_path=results, command=command
    )
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
