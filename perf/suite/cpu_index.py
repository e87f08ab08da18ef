"""How fast this machine runs syncd-like Python right now: a fixed workload, timed.

The benchmark machines are shared, and the same code measures up to 1.5x
slower when neighbours are busy. Every figure of a run moves with this index,
so ``make bench`` records it on the server core at the start and the end of the
run: comparing two runs' figures without their indexes compares the machines.

The work is what a request does in small: decode a JSON op, touch dicts, pack a
msgpack record, call methods, format an answer. The figure is the best of
several rounds (noise only ever adds time), in microseconds per iteration.
Usage: python -m perf.suite.cpu_index [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import msgpack

BODY = '{"op":"increment","amount":1}'
ROUNDS = 7
ITERATIONS = 20_000


class _Counter:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.seq = 0

    def apply(self, client: str, amount: int) -> dict[str, int]:
        self.counts[client] = self.counts.get(client, 0) + amount
        self.seq += 1
        return {client: self.counts[client]}


def _one_round(n: int) -> float:
    packer = msgpack.Packer()
    counter = _Counter()
    started = time.perf_counter()
    for i in range(n):
        op = json.loads(BODY)
        delta = counter.apply(str(i & 63), op["amount"])
        record = {"ns": "bench", "id": "gc:x", "seq": counter.seq, "op": op, "delta": delta}
        packer.pack(record)
        b'{"ok":true,"seq":%d}' % counter.seq
    return (time.perf_counter() - started) / n * 1e6


def measure(rounds: int = ROUNDS, n: int = ITERATIONS) -> float:
    """Microseconds per iteration, best of ``rounds``."""
    return min(_one_round(n) for _ in range(rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print {'us': figure} only")
    args = parser.parse_args()
    us = measure()
    print(json.dumps({"us": round(us, 3)}) if args.json else f"cpu index: {us:.2f} us")


if __name__ == "__main__":
    main()
