"""What native TLS costs: the same workloads on a plain and a TLS syncd, in one run.

1. requests/s: ``--connections`` keep-alive connections writing increments
   (``POST .../ops``) for ``--seconds``;
2. new connections/s: connect, one ``GET /health/live``, close (the handshake
   cost, TLS 1.3 with a P-256 certificate);
3. SSE fan-out: ``--subscribers`` event streams on one CRDT, one op every
   ``1/--rate`` s; the time from the op's answer to the last subscriber's
   event (p50, p99).

Servers are ``python -m syncd`` subprocesses (``SERVICE_FSYNC=batch``), plain
and TLS alternately, ``--repeat`` times each; medians and ratios are printed.
A throw-away CA is made for the run.

    .venv/bin/python -m perf.studies.tls [--seconds 3] [--connections 16] [--subscribers 200]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from perf.lib.servers import ADMIN, syncd
from tests.pki import client_context, make_pki

NS = "bench"


@contextlib.contextmanager
def node(data: Path, tls: tuple[Path, Path] | None) -> Iterator[int]:
    env = {"SERVICE_RATE_LIMIT": "1000000", "SERVICE_FSYNC": "batch"}
    if tls is not None:
        env["SERVICE_TLS_CERT"], env["SERVICE_TLS_KEY"] = str(tls[0]), str(tls[1])
    with syncd(env, data_dir=str(data)) as (port, _):
        yield port


async def open_conn(
    port: int, context: ssl.SSLContext | None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="localhost" if context else None
    )


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return await reader.readexactly(length)


def op_request(crdt_id: str) -> bytes:
    body = b'{"op":"increment"}'
    return (
        f"POST /v1/namespaces/{NS}/crdts/{crdt_id}/ops HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {ADMIN}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def requests_per_s(
    port: int, context: ssl.SSLContext | None, connections: int, seconds: float
) -> float:
    done = 0
    stop = time.perf_counter() + seconds

    async def worker(i: int) -> None:
        nonlocal done
        reader, writer = await open_conn(port, context)
        request = op_request(f"gc:t{i % 8}")
        while time.perf_counter() < stop:
            writer.write(request)
            await read_answer(reader)
            done += 1
        writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(connections)))
    return done / (time.perf_counter() - started)


async def connections_per_s(port: int, context: ssl.SSLContext | None, seconds: float) -> float:
    done = 0
    stop = time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < stop:
        reader, writer = await open_conn(port, context)
        writer.write(b"GET /health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        await read_answer(reader)
        writer.close()
        done += 1
    return done / (time.perf_counter() - started)


async def fan_out(
    port: int, context: ssl.SSLContext | None, subscribers: int, ops: int, rate: float
) -> list[float]:
    crdt = "gc:fan"
    reader, writer = await open_conn(port, context)
    writer.write(op_request(crdt))
    await read_answer(reader)
    arrivals: dict[int, list[float]] = {}

    async def subscriber() -> None:
        r, w = await open_conn(port, context)
        w.write(
            f"GET /v1/namespaces/{NS}/crdts/{crdt}/events HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {ADMIN}\r\n\r\n".encode()
        )
        await r.readuntil(b"\r\n\r\n")
        count = 0
        while line := await r.readline():
            if line.startswith(b"data: "):
                arrivals.setdefault(count, []).append(time.perf_counter())
                count += 1
                if count > ops:
                    break
        w.close()

    tasks = [asyncio.ensure_future(subscriber()) for _ in range(subscribers)]
    while len(arrivals.get(0, [])) < subscribers:
        await asyncio.sleep(0.01)
    latencies = []
    for n in range(1, ops + 1):
        writer.write(op_request(crdt))
        await read_answer(reader)
        acked = time.perf_counter()
        while len(arrivals.get(n, [])) < subscribers:
            await asyncio.sleep(0.0005)
        latencies.append(max(arrivals[n]) - acked)
        await asyncio.sleep(1 / rate)
    await asyncio.gather(*tasks)
    writer.close()
    return latencies


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(
    port: int, context: ssl.SSLContext | None, args: argparse.Namespace
) -> dict[str, float]:
    rps = await requests_per_s(port, context, args.connections, args.seconds)
    cps = await connections_per_s(port, context, args.seconds)
    lat = await fan_out(port, context, args.subscribers, args.ops, args.rate)
    return {
        "requests_per_s": rps,
        "connections_per_s": cps,
        "fanout_p50_ms": pct(lat, 0.5) * 1e3,
        "fanout_p99_ms": pct(lat, 0.99) * 1e3,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--subscribers", type=int, default=200)
    ap.add_argument("--ops", type=int, default=100)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pki = make_pki(root)
        files = pki.issue("server", 2)
        runs: dict[str, list[dict[str, float]]] = {"plain": [], "tls": []}
        for i in range(args.repeat):
            for label, tls, context in (("plain", None, None), ("tls", files, client_context(pki))):
                (root / f"{label}{i}").mkdir()
                with node(root / f"{label}{i}", tls) as port:
                    runs[label].append(asyncio.run(measure(port, context, args)))
    figures: dict[str, dict[str, float]] = {}
    for label, results in runs.items():
        figures[label] = {k: statistics.median(r[k] for r in results) for k in results[0]}
    plain, tls = figures["plain"], figures["tls"]
    print(f"median of {args.repeat} alternating runs per side")
    for key in plain:
        print(
            f"  {key:<20} plain {plain[key]:10.1f}   tls {tls[key]:10.1f}   tls/plain {tls[key] / plain[key]:.2f}x"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
