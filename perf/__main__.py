"""``python -m perf`` (``make bench``): every benchmark, its peers, one table.

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

from perf.suite import BENCHMARKS, RESULTS, run_suite, select


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf", description=__doc__.split("\n")[0])
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
        for name, (_, about) in BENCHMARKS.items():
            print(f"{name:<12} {about}")
        return 0
    names = select(args.only)
    results = args.results or (None if args.quick else str(RESULTS))
    command = shlex.join(["python", "-m", "perf", *(sys.argv[1:] if argv is None else argv)])
    report = run_suite(
        names, quick=args.quick, json_path=args.json, results_path=results, command=command
    )
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
