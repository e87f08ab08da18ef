"""Slowloris: many connections that trickle request-head bytes, never finishing.

Run by hand against a server (or by tests/limits/test_slow_clients.py)::

    python perf/lib/slowloris.py --port 3000 --connections 1000 --interval 0.5 --duration 15

Each connection sends one byte of an endless request head every ``interval``
seconds. The script prints ``ready`` once every connection is open, then, at
the end, one JSON line: how many connections the server closed and when
(seconds after the connection's first byte), and how many were still open.
A server with a header timeout closes every trickler about that long after
its first byte; without one they all stay open.

The tricklers run in this separate process so their CPU is not the server's
(or the measuring client's) loop. ``--probe`` also measures, from here, how
long a normal ``GET /health/live`` takes on a fresh connection while the
tricklers run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from typing import Any

HEAD = b"GET /health/live HTTP/1.1\r\nHost: slow\r\nX-Slow: " + b"a" * 100_000
"""Bytes the tricklers send one at a time; longer than any run needs."""

CONNECT_BATCH = 100
"""Connections opened at once while setting up (a burst of 1000 SYNs can
overflow a small accept backlog)."""


def raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))


class Trickler(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.sent = 0
        self.first_byte_at: float | None = None
        self.closed_at: float | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        pass  # whatever the server says (a 408, or nothing) the close is what counts

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed_at = time.monotonic()

    def trickle(self) -> None:
        if self.closed_at is not None or self.transport is None:
            return
        if self.first_byte_at is None:
            self.first_byte_at = time.monotonic()
        self.transport.write(HEAD[self.sent : self.sent + 1])
        self.sent += 1


async def probe(host: str, port: int) -> float:
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"GET /health/live HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
    data = await reader.read()
    writer.close()
    if not data.startswith(b"HTTP/1.1 200 "):
        raise RuntimeError(f"probe answered {data[:80]!r}")
    return time.perf_counter() - started


async def run(args: argparse.Namespace) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    tricklers: list[Trickler] = []
    for start in range(0, args.connections, CONNECT_BATCH):
        batch = min(CONNECT_BATCH, args.connections - start)
        pairs = await asyncio.gather(
            *(loop.create_connection(Trickler, args.host, args.port) for _ in range(batch))
        )
        tricklers += [protocol for _, protocol in pairs]
    print("ready", flush=True)
    began = time.monotonic()
    probes: list[float] = []
    next_probe = began
    while time.monotonic() - began < args.duration:
        for trickler in tricklers:
            trickler.trickle()
        if args.probe and time.monotonic() >= next_probe:
            probes.append(await probe(args.host, args.port))
            next_probe = time.monotonic() + args.probe
        await asyncio.sleep(args.interval)
    closed = [t.closed_at - t.first_byte_at for t in tricklers if t.closed_at and t.first_byte_at]
    for trickler in tricklers:
        if trickler.transport is not None:
            trickler.transport.abort()
    result: dict[str, Any] = {
        "connections": len(tricklers),
        "closed_by_server": len(closed),
        "still_open": len(tricklers) - len(closed),
        "closed_after_s": {
            "min": round(min(closed), 3) if closed else None,
            "max": round(max(closed), 3) if closed else None,
        },
    }
    if probes:
        ordered = sorted(probes)
        result["probe_ms"] = {
            "count": len(ordered),
            "median": round(ordered[len(ordered) // 2] * 1000, 2),
            "max": round(ordered[-1] * 1000, 2),
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between bytes")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds of trickling")
    parser.add_argument(
        "--probe", type=float, default=0.0, help="also time a normal request this often (s)"
    )
    args = parser.parse_args(argv)
    raise_fd_limit(args.connections + 64)
    try:
        import uvloop

        result = uvloop.run(run(args))
    except ImportError:  # pragma: no cover - uvloop is a dependency
        result = asyncio.run(run(args))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
