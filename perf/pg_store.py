"""The PostgreSQL store against the embedded one, and delta propagation between nodes.

1. Ops/s and latency (p50, p99) of ``POST .../ops`` on one node backed by
   PostgreSQL and on one node on the embedded log (``SERVICE_FSYNC=batch``,
   durable like PostgreSQL's synchronous commit), in the same run with the
   same client: ``--concurrency`` keep-alive connections, each writing one op
   at a time to random CRDTs among ``--crdts``.
2. Propagation: two nodes on one database, an SSE subscriber on node B, one
   op at a time written on node A; the time from sending the op to the delta
   arriving at B (p50, p99). Small deltas travel by NOTIFY; large ones by the
   logical replication stream (``SERVICE_WAL_CONNSTR`` set) or as a reference
   that B reads from the table (unset).

Servers run as ``python -m syncd`` subprocesses; each run uses a fresh
database, dropped afterwards.

    .venv/bin/python -m perf.pg_store [--ops 3000] [--concurrency 16] [--crdts 64] [--samples 300]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgpack
import psycopg
from psycopg import sql

ADMIN = "perf-admin-secret"
SIGNING_KEY = "22" * 32
NS = "bench"
LARGE_BYTES = 20_000
"""A delta too large for NOTIFY (8000 bytes)."""
FIGURES: dict[str, dict[str, float]] = {}
"""What report() printed, by name, for --json."""


# -- processes and databases -------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def database(server_url: str) -> Iterator[str]:
    name = "syncd_perf_" + secrets.token_hex(4)
    with psycopg.connect(f"{server_url}/postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield f"{server_url}/{name}"
    finally:
        with psycopg.connect(f"{server_url}/postgres", autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextlib.contextmanager
def node(env: dict[str, str], data_dir: Path) -> Iterator[int]:
    port = free_port()
    full_env = {
        **os.environ,
        "SERVICE_BIND": f"127.0.0.1:{port}",
        "SERVICE_DATA_DIR": str(data_dir),
        "SERVICE_SIGNING_KEY": SIGNING_KEY,
        "SERVICE_ADMIN_TOKEN": ADMIN,
        "SERVICE_LOG_LEVEL": "warning",
        "SERVICE_RATE_LIMIT": "1000000",
        **env,
    }
    proc = subprocess.Popen([sys.executable, "-m", "syncd"], env=full_env)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"syncd exited with {proc.returncode}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", port), 0.2) as s,
            ):
                s.sendall(b"GET /health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    break
            if time.monotonic() > deadline:
                raise TimeoutError("syncd did not become ready")
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(15)


# -- a minimal keep-alive HTTP client ------------------------------------------------------


class Http:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Http:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def post(self, path: str, body: Any) -> tuple[int, bytes]:
        payload = json.dumps(body).encode()
        self.writer.write(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.2f} ms"


# -- 1. throughput and latency -----------------------------------------------------------


async def throughput(
    port: int, ops: int, concurrency: int, crdts: int
) -> tuple[float, list[float]]:
    latencies: list[float] = []
    remaining = ops

    async def worker(seed: int) -> None:
        nonlocal remaining
        rng = random.Random(seed)
        http = await Http.open(port)
        try:
            while remaining > 0:
                remaining -= 1
                path = f"/v1/namespaces/{NS}/crdts/gc:c{rng.randrange(crdts)}/ops"
                started = time.perf_counter()
                status, body = await http.post(path, {"op": "increment"})
                latencies.append(time.perf_counter() - started)
                if status != 200:
                    raise RuntimeError(f"{status} {body!r}")
        finally:
            http.close()

    await asyncio.gather(*(worker(-1 - i) for i in range(concurrency)))  # warm-up: create the CRDTs
    latencies.clear()
    remaining = ops
    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return ops / (time.perf_counter() - started), latencies


# -- 2. propagation ------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def subscribe(port: int, crdt_id: str) -> AsyncIterator[dict[int, asyncio.Future[float]]]:
    """Futures by seq, resolved with the arrival time of that delta on ``port``."""
    waiting: dict[int, asyncio.Future[float]] = {}
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
    writer.write(
        f"GET /v1/namespaces/{NS}/crdts/{crdt_id}/events HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {ADMIN}\r\n\r\n".encode()
    )
    await reader.readuntil(b"\r\n\r\n")
    loop = asyncio.get_running_loop()

    async def read() -> None:
        while line := await reader.readline():
            if line.startswith(b"data: "):
                arrived = time.perf_counter()
                delta = msgpack.unpackb(base64.b64decode(line[6:].strip()), raw=False)
                future = waiting.setdefault(delta.get("seq", 0), loop.create_future())
                if not future.done():
                    future.set_result(arrived)

    task = loop.create_task(read())
    try:
        yield waiting
    finally:
        task.cancel()
        writer.close()


async def propagation(
    port_a: int, port_b: int, crdt_id: str, samples: int, size: int
) -> tuple[list[float], list[float]]:
    """Per op: from sending it to A until B's subscriber has it, and from A's answer until then."""
    http = await Http.open(port_a)
    loop = asyncio.get_running_loop()
    results: list[float] = []
    after_ack: list[float] = []
    try:
        async with subscribe(port_b, crdt_id) as waiting:
            for i in range(samples):
                value = secrets.token_hex(size // 2) if size else i
                sent = time.perf_counter()
                status, body = await http.post(
                    f"/v1/namespaces/{NS}/crdts/{crdt_id}/ops", {"op": "set", "value": value}
                )
                acked = time.perf_counter()
                if status != 200:
                    raise RuntimeError(f"{status} {body!r}")
                seq = json.loads(body)["seq"]
                future = waiting.setdefault(seq, loop.create_future())
                arrived = await asyncio.wait_for(future, 10)
                results.append(arrived - sent)
                after_ack.append(max(0.0, arrived - acked))
    finally:
        http.close()
    return results, after_ack


# -- main ----------------------------------------------------------------------------------


def report(name: str, values: list[float], extra: str = "", rate: float | None = None) -> None:
    FIGURES[name] = {
        "p50_ms": percentile(values, 0.5) * 1000,
        "p99_ms": percentile(values, 0.99) * 1000,
        **({"ops_per_s": rate} if rate is not None else {}),
    }
    print(
        f"  {name:<36} p50 {ms(percentile(values, 0.5))}  p99 {ms(percentile(values, 0.99))}{extra}"
    )


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(
            f"ops: {args.ops} increments, {args.concurrency} connections, "
            f"{args.crdts} CRDTs, one node"
        )
        with node({"SERVICE_FSYNC": "batch"}, root / "embedded") as port:
            rate, lat = await throughput(port, args.ops, args.concurrency, args.crdts)
        report("embedded log (fsync=batch)", lat, f"  {rate:8.0f} ops/s", rate)
        with database(args.pg) as url, node({"DATABASE_URL": url}, root / "pg") as port:
            rate, lat = await throughput(port, args.ops, args.concurrency, args.crdts)
        report("PostgreSQL", lat, f"  {rate:8.0f} ops/s", rate)

        print(f"propagation: write on node A, SSE subscriber on node B, {args.samples} samples")
        for wal in (False, True):
            with database(args.pg) as url:
                env = {"DATABASE_URL": url}
                if wal:
                    env["SERVICE_WAL_CONNSTR"] = url
                with (
                    node({**env, "SERVICE_NODE_ID": "a"}, root / "a") as a,
                    node({**env, "SERVICE_NODE_ID": "b"}, root / "b") as b,
                ):
                    await asyncio.sleep(1.0)  # the replication slots are being created
                    if not wal:
                        small, small_ack = await propagation(a, b, "lw:small", args.samples, 0)
                        report("small delta (NOTIFY): write->B", small)
                        report("small delta (NOTIFY): ack->B", small_ack)
                    large, large_ack = await propagation(
                        a, b, "lw:large", args.samples // 3, LARGE_BYTES
                    )
                    path = "replication" if wal else "reference"
                    report(f"{LARGE_BYTES // 1000} KB ({path}): write->B", large)
                    report(f"{LARGE_BYTES // 1000} KB ({path}): ack->B", large_ack)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--crdts", type=int, default=64)
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument(
        "--pg", default=os.environ.get("SYNCD_BENCH_PG", "postgresql://root@127.0.0.1:5432")
    )
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    asyncio.run(run(args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(FIGURES, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
