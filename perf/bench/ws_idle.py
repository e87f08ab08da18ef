"""WebSocket idle cost: server memory per connection.

The server runs as a subprocess; this process (pinned to core 1) opens
``--connections`` WebSocket connections, each subscribed to one CRDT (its own
by default, the costlier case for the hub; ``--shared`` puts all on one), and
leaves them idle. Figure: the growth of the server's RSS divided by the
connection count, measured after a warm-up batch so the interpreter's
one-time allocations are not counted. Target: <= 20 KB per connection.

Both processes need a file descriptor each per connection: the soft limit is
raised to the hard limit here, and the server inherits it.

Usage: python -m perf.bench.ws_idle [--connections N] [--shared]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import time

import uvloop

from perf.bench.ws_fanout import RawWs, message, open_clients
from perf.lib.servers import LOAD_CORE, bench_token, syncd
from perf.suite.registry import TARGETS

NS = "bench"
TARGET = TARGETS["ws-idle.per-connection"]
WARMUP_CONNECTIONS = 200
"""Opened (and kept) before the baseline: first-use allocations (code paths,
caches, the hub's first tables) are not per-connection cost."""
SETTLE_S = 1.0
"""Pause before each RSS reading so in-flight work is done."""
FD_MARGIN = 200


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        if hard < needed:
            raise SystemExit(f"need {needed} file descriptors, the hard limit is {hard}")


async def open_subscribed(
    port: int, token: str, count: int, first: int, shared: bool
) -> list[RawWs]:
    snapshots = [0]

    def on_frame(opcode: int, payload: bytes, now: float) -> None:
        snapshots[0] += 1

    clients = await open_clients(port, f"/v1/namespaces/{NS}/ws?token={token}", count, on_frame)
    for i, client in enumerate(clients):
        crdt_id = "gc:idle" if shared else f"gc:idle-{first + i}"
        client.send(message({"kind": "subscribe", "id": crdt_id}))
    while snapshots[0] < count:
        await asyncio.sleep(0.01)
    return clients


async def measure(port: int, pid: int, token: str, count: int, shared: bool) -> dict[str, float]:
    held = await open_subscribed(port, token, WARMUP_CONNECTIONS, 0, shared)
    await asyncio.sleep(SETTLE_S)
    base = rss_bytes(pid)
    started = time.monotonic()
    held += await open_subscribed(port, token, count, WARMUP_CONNECTIONS, shared)
    took = time.monotonic() - started
    await asyncio.sleep(SETTLE_S)
    grown = rss_bytes(pid) - base
    for client in held:
        assert client.transport is not None
        client.transport.close()
    return {
        "base_mb": base / 2**20,
        "grown_mb": grown / 2**20,
        "per_conn": grown / count,
        "open_s": took,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--shared", action="store_true", help="all on one CRDT")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    total = args.connections + WARMUP_CONNECTIONS
    raise_fd_limit(total + FD_MARGIN)
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {int(LOAD_CORE)})
    env = {"SERVICE_MAX_CONNECTIONS": str(total + FD_MARGIN), "SERVICE_FSYNC": "never"}
    with syncd(env) as (port, proc):
        token = bench_token(port, NS)
        r = uvloop.run(measure(port, proc.pid, token, args.connections, args.shared))
    where = "one shared CRDT" if args.shared else "one CRDT each"
    print(f"ws idle: {args.connections:,} connections subscribed to {where}")
    print(
        f"  server RSS {r['base_mb']:.1f} MiB -> +{r['grown_mb']:.1f} MiB: "
        f"{r['per_conn'] / 1024:.1f} KiB per connection  (target {TARGET})"
    )
    print(f"  opened and subscribed in {r['open_s']:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**r, "connections": args.connections, "shared": args.shared}, f, indent=2)


if __name__ == "__main__":
    main()
