"""Engine throughput: plan + apply for single gcounter increments and 100-op batches.

    .venv/bin/python -m perf.studies.engine_ops [seconds-per-case]

Prints ops/s per case. No I/O: this is the CPU cost the engine adds to each op.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from syncd.crdt.engine import Engine


def measure(label: str, ops_per_call: int, call: Callable[[], Any], seconds: float) -> None:
    calls = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(1000):
            call()
        calls += 1000
        now = time.perf_counter()
        if now >= deadline:
            break
    elapsed = now - start
    ops = calls * ops_per_call
    print(f"{label:<44} {ops / elapsed:>12,.0f} ops/s  {elapsed / calls * 1e6:8.2f} us/call")


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    engine = Engine()
    single = {"op": "increment"}
    measure(
        "gcounter increment (plan+apply, 1 op)",
        1,
        lambda: engine.apply(engine.plan("perf", "gc:one", single), 7),
        seconds,
    )
    with_id = iter(range(10**12))
    measure(
        "gcounter increment with op_id (1 op)",
        1,
        lambda: engine.apply(
            engine.plan("perf", "gc:ids", {"op": "increment", "op_id": f"k{next(with_id)}"}), 7
        ),
        seconds,
    )
    batch = [{"op": "increment", "amount": 2}] * 100
    measure(
        "gcounter increment (plan+apply, 100-op batch)",
        100,
        lambda: engine.apply(engine.plan("perf", "gc:batch", batch), 7),
        seconds / 10,
    )
    orset = [{"op": "add", "element": i % 50} for i in range(100)]
    measure(
        "orset add (100-op batch)",
        100,
        lambda: engine.apply(engine.plan("perf", "or:batch", orset), 7),
        seconds / 10,
    )


if __name__ == "__main__":
    main()
