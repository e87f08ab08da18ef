"""What durability costs at the server: SERVICE_FSYNC=batch against never, same run.

Each mode gets a fresh ``python -m syncd`` (pinned to core 0, its own data
directory) and ``--writers`` concurrent HTTP writers from perf.lib.loadgen (a
separate process on core 1), closed loop: each connection sends a gcounter
increment, waits for the answer, sends the next. With ``batch`` an answer
means the op is on disk (group commit); with ``never`` it is only written.
The modes alternate for ``--rounds`` rounds and each keeps its best round, so
a burst of load from elsewhere on the shared machine hurts both alike.
Target: batch >= 0.80x never.

Also the log bytes per gcounter increment: the size of the log segments
over ``wal_last_seq`` from /health/ready (every increment is one record),
when no snapshot has compacted the log meanwhile.

Usage: python -m perf.bench.durability [--writers 50] [--duration S] [--rounds N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import urllib.request
from typing import Any

from perf.lib.loadgen import headroom_note, loadgen
from perf.lib.servers import bench_token, syncd
from perf.suite.registry import TARGETS

MODES = ("batch", "never")
OP_PATH = "/v1/namespaces/bench/crdts/gc:durable/ops"
OP_BODY = '{"op":"increment","amount":1}'
TARGET = TARGETS["durability.batch/never"]


def wal_last_seq(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/ready", timeout=10) as resp:
        return int(json.load(resp)["wal_last_seq"])


def dir_bytes(path: str) -> int:
    if not os.path.isdir(path):
        return 0
    return sum(os.path.getsize(os.path.join(path, name)) for name in os.listdir(path))


def one(mode: str, writers: int, duration: float, warmup: float) -> dict[str, Any]:
    data_dir = tempfile.mkdtemp(prefix=f"syncd-durability-{mode}-")
    try:
        with syncd({"SERVICE_FSYNC": mode}, data_dir=data_dir) as (port, _):
            auth = f"authorization: Bearer {bench_token(port)}"
            r = loadgen(
                port,
                path=OP_PATH,
                method="POST",
                body=OP_BODY,
                headers=[auth],
                connections=writers,
                duration=duration,
                warmup=warmup,
            )
            records = wal_last_seq(port)
        snapshots = os.listdir(os.path.join(data_dir, "snapshots"))
        log_bytes = dir_bytes(os.path.join(data_dir, "log"))
        r["records"] = records
        r["log_bytes"] = log_bytes
        r["log_bytes_per_op"] = log_bytes / records if records and not snapshots else None
        return r
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def run(writers: int, duration: float, warmup: float, rounds: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for n in range(rounds):
        for mode in MODES if n % 2 == 0 else tuple(reversed(MODES)):
            r = one(mode, writers, duration, warmup)
            runs[mode].append(r)
            print(
                f"  fsync={mode:<5} {writers} writers: {r['rps']:>8.0f} ops/s"
                f"  p99 {r['p99_ms']:.2f} ms  {headroom_note(r)}  {r['statuses']}",
                flush=True,
            )
    best = {mode: max(runs[mode], key=lambda r: float(r["rps"])) for mode in MODES}
    per_op = [r["log_bytes_per_op"] for rs in runs.values() for r in rs if r["log_bytes_per_op"]]
    return {
        "writers": writers,
        "batch": best["batch"],
        "never": best["never"],
        "ratio": best["batch"]["rps"] / best["never"]["rps"] if best["never"]["rps"] else None,
        "log_bytes_per_op": min(per_op) if per_op else None,
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--writers", type=int, default=50)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of both modes")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.writers < 1:
        parser.error("--rounds and --writers must be >= 1")
    r = run(args.writers, args.duration, args.warmup, args.rounds)
    ratio = r["ratio"]
    print(
        f"durability: batch {r['batch']['rps']:.0f} ops/s, never {r['never']['rps']:.0f} ops/s,"
        f" ratio {ratio:.2f} (target {TARGET})"
    )
    if r["log_bytes_per_op"]:
        print(f"  log bytes per gcounter increment: {r['log_bytes_per_op']:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
