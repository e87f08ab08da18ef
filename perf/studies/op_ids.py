"""What remembering op_ids costs: bytes per remembered id, and the memory of
one CRDT taking 5,000 ops/s (every op with an op_id) under the default TTL.

The engine runs in-process on a simulated clock (ops are stamped as if they
came at ``--rate`` per second), so the figure is the steady state after the
TTL has passed, measured with tracemalloc; and the time per op with op_ids
against the same ops without, alternating.

Usage: python -m perf.studies.op_ids [--rate 5000] [--seconds 150] [--rounds 3]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
import uuid

from syncd.crdt.engine import OP_ID_WINDOW, Engine
from syncd.crdt.opids import OP_ID_TTL_MS


class _Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def steady_state(rate: int, seconds: int) -> tuple[int, int]:
    """(bytes of the CRDT's op_id memory, ids remembered) after ``seconds`` at ``rate``."""
    clock = _Clock()
    engine = Engine(clock_ms=clock)
    ids = [str(uuid.uuid4()) for _ in range(rate)]
    step_us = 1_000_000 // rate
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for second in range(seconds):
        for i in range(rate):
            clock.now = 1_700_000_000_000 + second * 1000 + (i * step_us) // 1000
            op = {"op": "increment", "op_id": f"{ids[i]}-{second}"}
            engine.apply(engine.plan("bench", "gc:hot", op), 1)
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    entry = engine.get("bench", "gc:hot")
    assert entry is not None
    return used, len(entry.op_ids)


def op_cost(n: int, with_ids: bool) -> float:
    """Seconds per op applied through plan+apply, on a CRDT past its window."""
    clock = _Clock()
    engine = Engine(clock_ms=clock)
    ops = [
        {"op": "increment", "op_id": f"op-{i}"} if with_ids else {"op": "increment"}
        for i in range(n)
    ]
    started = time.perf_counter()
    for i, op in enumerate(ops):
        clock.now += i % 2  # 2,000 ops a simulated second
        engine.apply(engine.plan("bench", "gc:hot", op), 1)
    return (time.perf_counter() - started) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"defaults: window {OP_ID_WINDOW} ids, TTL {OP_ID_TTL_MS // 1000} s")
    used, count = steady_state(args.rate, args.seconds)
    print(
        f"one CRDT at {args.rate} ops/s after {args.seconds} s: {count} op_ids remembered, "
        f"{used / 1e6:.1f} MB, {used / count:.1f} bytes per remembered id"
    )
    plain, ided = [], []
    for _ in range(args.rounds):
        plain.append(op_cost(200_000, False))
        ided.append(op_cost(200_000, True))
    p, d = min(plain), min(ided)
    print(
        f"engine op without op_id {p * 1e6:.2f} us, with op_id {d * 1e6:.2f} us "
        f"({d / p:.2f}x; best of {args.rounds} alternating rounds)"
    )


if __name__ == "__main__":
    main()
