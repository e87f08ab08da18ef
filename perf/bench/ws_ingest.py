"""WebSocket ingest: one connection pipelining single-op messages.

The server runs as a subprocess (SERVICE_FSYNC=batch: every ack means the op
is durable) pinned to core 0; this process, pinned to core 1, keeps
``--window`` op messages in flight (one ``gcounter`` increment each, counted
against a token's rate limit like any op) and sends one more per ack.
Figures: acknowledged durable ops/s, and both processes' CPU. Target: >= 20k
ops/s.

Usage: python -m perf.bench.ws_ingest [--window N] [--duration S] [--warmup S]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

import uvloop

from perf.bench.ws_fanout import RawWs, message, open_clients
from perf.lib.proc import cpu_seconds
from perf.lib.servers import LOAD_CORE, bench_token, syncd
from perf.suite.registry import TARGETS

NS = "bench"
TARGET = TARGETS["ws-ingest.ops"]
OP = message({"kind": "op", "id": "gc:ingest", "op": {"op": "increment"}, "ref": 0})
ACK_MARK = b"\xa3ack"
"""msgpack of the string "ack": present in every ack, absent from errors."""


async def ingest(
    port: int, token: str, window: int, warmup: float, duration: float
) -> dict[str, Any]:
    counts = {"acks": 0, "errors": 0}
    client: list[RawWs] = []

    def on_frame(opcode: int, payload: bytes, now: float) -> None:
        if ACK_MARK in payload[:12]:
            counts["acks"] += 1
        else:
            counts["errors"] += 1
            if counts["errors"] <= 3:
                print("error:", payload[:200], file=sys.stderr)
        client[0].send(OP)  # keep the window full

    client += await open_clients(port, f"/v1/namespaces/{NS}/ws?token={token}", 1, on_frame)
    client[0].send(OP * window)
    await asyncio.sleep(warmup)
    acks0, cpu0, t0 = counts["acks"], time.process_time(), time.monotonic()
    await asyncio.sleep(duration)
    elapsed = time.monotonic() - t0
    return {
        "ops_per_s": (counts["acks"] - acks0) / elapsed,
        "errors": counts["errors"],
        "client_cpu": (time.process_time() - cpu0) / elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--window", type=int, default=1000, help="op messages in flight")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {int(LOAD_CORE)})
    with syncd({"SERVICE_FSYNC": os.environ.get("BENCH_FSYNC", "batch")}) as (port, proc):
        token = bench_token(port, NS)
        cpu0 = cpu_seconds(proc.pid)
        t0 = time.monotonic()
        r = uvloop.run(ingest(port, token, args.window, args.warmup, args.duration))
        server_cpu = (cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - t0)
    print(f"ws ingest: one connection, {args.window} single-op messages in flight, fsync batch")
    print(f"  acknowledged durable ops/s {r['ops_per_s']:,.0f}  (target {TARGET})")
    print(
        f"  errors {r['errors']}  CPU: server {server_cpu:.0%}, client {r['client_cpu']:.0%} of a core"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**r, "server_cpu": server_cpu, "window": args.window}, f, indent=2)


if __name__ == "__main__":
    main()
