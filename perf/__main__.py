"""``python -m perf`` (``make bench``): the benchmark suite, perf.suite; see perf/README.md."""

from __future__ import annotations

from perf.suite.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(prog="python -m perf"))
