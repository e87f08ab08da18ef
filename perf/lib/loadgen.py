"""An HTTP/1.1 load generator on uvloop with pre-built requests.

Runs in its own process (ideally pinned to the other core) and reports JSON:
requests/s, latency percentiles, and its own CPU use so the caller can tell
whether the generator, not the server, was the limit.

closed loop: ``--connections N --duration S`` — each connection sends a request,
waits for the answer, sends the next.
open loop: ``--rate R`` — requests are sent on a fixed schedule spread over the
connections; latency is measured from the scheduled send time, so queueing
shows (no coordinated omission).

``--ports P1,P2,...`` spreads the connections over several servers (a
cluster's nodes), connection ``k`` on the ``k % n``-th. ``--spread K`` with a
path holding ``{i}`` sends each request to one of ``K`` paths, chosen at
random (a fixed seed per connection), e.g. ``/v1/namespaces/b/crdts/gc:c{i}/ops``.
``--affinity`` keeps each server's paths to itself: a connection on the
``j``-th of ``n`` servers picks only among the paths ``i`` with ``i % n == j``
(a load balancer routing by CRDT).

A benchmark calls :func:`loadgen`, which runs this module as a process on the
load core and returns what it printed.

Usage: python -m perf.lib.loadgen --port P --path /x --method POST --body '{..}' \
    --header 'authorization: Bearer ...' [--rate R] [--connections N] [--duration S]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import uvloop

from perf.lib.servers import LOAD_CORE, ROOT, pinned


def build_request(method: str, path: str, body: bytes, headers: list[str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: bench"]
    lines += headers
    if body:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class Conn(asyncio.Protocol):
    """Counts complete responses (heads with Content-Length) as they arrive."""

    def __init__(self, stats: Stats) -> None:
        self.stats = stats
        self.buf = b""
        self.waiters: list[float] = []
        self.ready: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None
        self.lost = asyncio.get_event_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data
        pos = 0
        now = time.perf_counter()
        while True:
            end = buf.find(b"\r\n\r\n", pos)
            if end < 0:
                break
            head = buf[pos:end]
            idx = head.find(b"content-length: ")
            length = 0
            if idx >= 0:
                stop = head.find(b"\r\n", idx)
                length = int(head[idx + 16 : stop if stop >= 0 else len(head)])
            if end + 4 + length > len(buf):
                break
            status = head[9:12]
            pos = end + 4 + length
            sent = self.waiters.pop(0)
            self.stats.record(now - sent, status)
            if self.ready is not None and not self.ready.done():
                self.ready.set_result(None)
        self.buf = buf[pos:]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        if self.ready is not None and not self.ready.done():
            self.ready.set_exception(ConnectionError("closed"))


class Stats:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.statuses: dict[str, int] = {}
        self.recording = False
        self.answered = 0
        """Every answer, the warm-up's included."""

    def record(self, latency: float, status: bytes) -> None:
        self.answered += 1
        if self.recording:
            self.latencies.append(latency)
            key = status.decode()
            self.statuses[key] = self.statuses.get(key, 0) + 1


async def connect(args: argparse.Namespace, stats: Stats) -> list[Conn]:
    loop = asyncio.get_running_loop()
    ports = [int(p) for p in str(args.ports or args.port).split(",")]
    conns = []
    for k in range(args.connections):
        port = ports[k % len(ports)]
        _, proto = await loop.create_connection(lambda: Conn(stats), "127.0.0.1", port)
        conns.append(proto)
    return conns


async def closed_loop(args: argparse.Namespace, requests: list[bytes], stats: Stats) -> float:
    loop = asyncio.get_running_loop()
    conns = await connect(args, stats)
    stop = False

    servers = len(args.ports.split(",")) if args.ports else 1

    async def worker(conn: Conn, seed: int) -> None:
        pick = random.Random(seed).randrange
        mine = requests[seed % servers :: servers] if args.affinity else requests
        count = len(mine)
        while not stop:
            conn.ready = loop.create_future()
            conn.waiters.append(time.perf_counter())
            assert conn.transport is not None
            conn.transport.write(mine[pick(count)] if count > 1 else mine[0])
            await conn.ready

    tasks = [asyncio.create_task(worker(c, k)) for k, c in enumerate(conns)]
    await asyncio.sleep(args.warmup)
    stats.recording = True
    started = time.perf_counter()
    await asyncio.sleep(args.duration)
    stats.recording = False
    elapsed = time.perf_counter() - started
    stop = True
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in conns:
        assert c.transport is not None
        c.transport.close()
    return elapsed


async def open_loop(args: argparse.Namespace, requests: list[bytes], stats: Stats) -> float:
    conns = await connect(args, stats)
    pick = random.Random(0).randrange
    interval = 1.0 / args.rate
    total = int(args.rate * (args.duration + args.warmup))
    warm = int(args.rate * args.warmup)
    start = time.perf_counter()
    for i in range(total):
        scheduled = start + i * interval
        delay = scheduled - time.perf_counter()
        if delay > 0.0005:
            await asyncio.sleep(delay)
        if i == warm:
            stats.recording = True
            recorded_from = time.perf_counter()
        conn = conns[i % len(conns)]
        conn.waiters.append(scheduled)
        assert conn.transport is not None
        conn.transport.write(requests[pick(len(requests))])
    await asyncio.sleep(0.5)
    stats.recording = False
    for c in conns:
        assert c.transport is not None
        c.transport.close()
    return time.perf_counter() - 0.5 - recorded_from


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    idx = min(len(sorted_values) - 1, int(q * len(sorted_values)))
    return sorted_values[idx]


async def run(args: argparse.Namespace) -> dict[str, object]:
    paths = [args.path.format(i=i) for i in range(args.spread)] if args.spread else [args.path]
    requests = [build_request(args.method, p, args.body.encode(), args.header) for p in paths]
    stats = Stats()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    wall0 = time.perf_counter()
    elapsed = await (
        open_loop(args, requests, stats) if args.rate else closed_loop(args, requests, stats)
    )
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    wall = time.perf_counter() - wall0
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    lat = sorted(stats.latencies)
    return {
        "requests": len(lat),
        "rps": len(lat) / elapsed if elapsed > 0 else 0.0,
        "p50_ms": percentile(lat, 0.50) * 1000,
        "p99_ms": percentile(lat, 0.99) * 1000,
        "statuses": stats.statuses,
        "answered": stats.answered,
        "generator_cpu": cpu / wall,
    }


# -- run from a benchmark, as a process of its own on the load core -----------------


def loadgen(
    port: int,
    *,
    path: str,
    method: str = "GET",
    body: str = "",
    headers: Sequence[str] = (),
    connections: int = 32,
    duration: float = 5.0,
    rate: float = 0.0,
    warmup: float = 1.0,
) -> dict[str, Any]:
    """Run this generator against ``port`` as a process on the load core; its JSON."""
    cmd = [
        sys.executable,
        "-m",
        "perf.lib.loadgen",
        "--port",
        str(port),
        "--path",
        path,
        "--method",
        method,
        "--connections",
        str(connections),
        "--duration",
        str(duration),
        "--warmup",
        str(warmup),
    ]
    if body:
        cmd += ["--body", body]
    for h in headers:
        cmd += ["--header", h]
    if rate:
        cmd += ["--rate", str(rate)]
    out = subprocess.run(
        pinned(cmd, LOAD_CORE),
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=duration + warmup + 60,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def headroom_note(result: dict[str, Any]) -> str:
    cpu = float(result.get("generator_cpu", 0))
    return "generator saturated!" if cpu > 0.9 else f"generator at {cpu:.0%} of a core"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int)
    parser.add_argument("--ports", help="several servers, comma-separated (instead of --port)")
    parser.add_argument("--path", default="/")
    parser.add_argument("--spread", type=int, default=0, help="paths: --path with {i} of 0..K-1")
    parser.add_argument(
        "--affinity", action="store_true", help="each server's connections keep to its paths"
    )
    parser.add_argument("--method", default="GET")
    parser.add_argument("--body", default="")
    parser.add_argument("--header", action="append", default=[])
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--rate", type=float, default=0.0)
    args = parser.parse_args()
    if (args.port is None) == (args.ports is None):
        parser.error("give --port or --ports")
    result = uvloop.run(run(args))
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
