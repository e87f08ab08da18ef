"""The PostgreSQL store against the embedded one, three nodes, and cross-node delivery.

All in one run, with the same client (keep-alive connections, one op at a
time each), servers as ``python -m syncd`` subprocesses, each PostgreSQL run
on a fresh database (dropped afterwards):

1. spread: ``--concurrency`` connections writing increments to random CRDTs
   among ``--crdts``, on one node on the embedded log (``SERVICE_FSYNC=batch``,
   durable like PostgreSQL's synchronous commit) and on one node on PostgreSQL.
2. hot: ``--hot-concurrency`` connections on one CRDT, both stores.
3. three nodes on one database, each taking a third of the hot connections on
   the same CRDT: together against the one-node PostgreSQL figure of 2.
4. cross-node delivery: load on node A at half of its measured peak, an SSE
   subscriber on node B; the time from sending a sampled op to A until B's
   subscriber has it (p50, p99); then one op at a time for small deltas
   (NOTIFY) and 20 KB ones (the replication stream, or a reference read from
   the table without it).

Ops/s, p50/p99 latency, and for PostgreSQL commits/s and ops per commit (from
the node's own ``/metrics``: ``service_store_commits_total`` and
``service_wal_entries_total``). Without ``--pg`` a throw-away PostgreSQL
server is started for the run (initdb in a temporary directory, production
durability settings: fsync and synchronous_commit on).

    .venv/bin/python -m perf.bench.pg_store [--ops 3000] [--pg postgresql://user@host:port]
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

from perf.lib.postgres import postgres_server

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


# -- 3. load at a fixed rate, for delivery under load ----------------------------------------


async def paced_load(port: int, rate: float, seconds: float, crdts: int, conns: int) -> int:
    """Open-loop load: ``rate`` increments/s spread over ``conns`` connections."""
    done = 0
    interval = conns / rate
    stop_at = time.perf_counter() + seconds

    async def worker(seed: int) -> None:
        nonlocal done
        rng = random.Random(seed)
        http = await Http.open(port)
        next_at = time.perf_counter() + rng.random() * interval
        try:
            while (now := time.perf_counter()) < stop_at:
                if next_at > now:
                    await asyncio.sleep(next_at - now)
                next_at += interval
                path = f"/v1/namespaces/{NS}/crdts/gc:c{rng.randrange(crdts)}/ops"
                status, body = await http.post(path, {"op": "increment"})
                if status != 200:
                    raise RuntimeError(f"{status} {body!r}")
                done += 1
        finally:
            http.close()

    await asyncio.gather(*(worker(100 + i) for i in range(conns)))
    return done


async def delivery_under_load(
    a: int, b: int, rate: float, seconds: float, crdts: int
) -> tuple[list[float], int]:
    """Write->B latency of one sampled op every 20 ms while A takes ``rate`` ops/s."""
    load = asyncio.ensure_future(paced_load(a, rate, seconds, crdts, 16))
    http = await Http.open(a)
    loop = asyncio.get_running_loop()
    results: list[float] = []
    try:
        async with subscribe(b, "lw:probe") as waiting:
            await asyncio.sleep(0.5)
            while not load.done():
                sent = time.perf_counter()
                status, body = await http.post(
                    f"/v1/namespaces/{NS}/crdts/lw:probe/ops", {"op": "set", "value": sent}
                )
                if status != 200:
                    raise RuntimeError(f"{status} {body!r}")
                seq = json.loads(body)["seq"]
                arrived = await asyncio.wait_for(waiting.setdefault(seq, loop.create_future()), 10)
                results.append(arrived - sent)
                await asyncio.sleep(0.02)
    finally:
        http.close()
    return results, await load


# -- main ----------------------------------------------------------------------------------


def report(name: str, values: list[float], extra: str = "", rate: float | None = None) -> None:
    FIGURES[name] = {
        "p50_ms": percentile(values, 0.5) * 1000,
        "p99_ms": percentile(values, 0.99) * 1000,
        **({"ops_per_s": rate} if rate is not None else {}),
    }
    print(
        f"  {name:<40} p50 {ms(percentile(values, 0.5))}  p99 {ms(percentile(values, 0.99))}{extra}"
    )


def scrape(port: int) -> dict[str, float]:
    """The node's own counters: commits and records written."""
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    wanted = ("service_store_commits_total", "service_wal_entries_total")
    found: dict[str, float] = {}
    for line in data.decode(errors="replace").splitlines():
        name, _, value = line.partition(" ")
        if name in wanted:
            found[name] = float(value)
    return found


async def measured(
    ports: list[int], ops: int, concurrency: int, crdts: int
) -> tuple[float, list[float], str]:
    """Throughput over ``ports`` together (``concurrency`` connections each) and the
    commits it took."""
    before = [scrape(p) for p in ports]
    started = time.perf_counter()
    runs = await asyncio.gather(
        *(throughput(p, ops // len(ports), concurrency, crdts) for p in ports)
    )
    elapsed = time.perf_counter() - started
    after = [scrape(p) for p in ports]
    total = sum(len(lat) for _, lat in runs)
    commits = sum(
        x["service_store_commits_total"] - y["service_store_commits_total"]
        for x, y in zip(after, before, strict=True)
    )
    records = sum(
        x["service_wal_entries_total"] - y["service_wal_entries_total"]
        for x, y in zip(after, before, strict=True)
    )
    rate = total / elapsed
    latencies = [v for _, lat in runs for v in lat]
    extra = f"  {rate:8.0f} ops/s"
    if commits:
        extra += f"  {commits / elapsed:7.0f} commits/s  {records / commits:5.1f} ops/commit"
    return rate, latencies, extra


def median_run(
    runs: list[tuple[float, list[float], str]],
) -> tuple[float, list[float], str]:
    return sorted(runs, key=lambda run: run[0])[len(runs) // 2]


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp, postgres_server(args.pg) as pg:
        root = Path(tmp)
        figures: dict[str, float] = {}
        parts = (
            set(args.only.split(","))
            if args.only
            else {"spread", "hot", "three", "delivery", "rest"}
        )
        for label, conns, crdts in (
            ("spread", args.concurrency, args.crdts),
            ("hot", args.hot_concurrency, 1),
        ):
            if label not in parts:
                continue
            print(f"{label}: {args.ops} increments, {conns} connections, {crdts} CRDTs, one node")
            # Alternating runs, the median of each side: the machine's noise
            # hits both alike.
            emb_runs: list[tuple[float, list[float], str]] = []
            pg_runs: list[tuple[float, list[float], str]] = []
            for i in range(args.repeat):
                with node({"SERVICE_FSYNC": "batch"}, root / f"embedded-{label}-{i}") as port:
                    emb_runs.append(await measured([port], args.ops, conns, crdts))
                with (
                    database(pg) as url,
                    node({"DATABASE_URL": url}, root / f"pg-{label}-{i}") as port,
                ):
                    pg_runs.append(await measured([port], args.ops, conns, crdts))
            emb, lat, extra = median_run(emb_runs)
            report(f"{label}: embedded log (fsync=batch)", lat, extra, emb)
            rate, lat, extra = median_run(pg_runs)
            report(f"{label}: PostgreSQL", lat, extra, rate)
            ratios = sorted(p[0] / e[0] for p, e in zip(pg_runs, emb_runs, strict=True))
            FIGURES[f"{label}: ratio"] = {"pg_over_embedded": rate / emb}
            print(
                f"  {label}: PostgreSQL / embedded log = {rate / emb:.2f}x"
                f" (medians of {args.repeat}; per pair {', '.join(f'{r:.2f}' for r in ratios)})"
            )
            figures[label] = rate

        if "three" not in parts:
            return
        per_node = max(1, args.hot_concurrency // 3)
        print(f"three nodes on one database, {per_node} connections each on one hot CRDT")
        with database(pg) as url:
            env = {"DATABASE_URL": url}
            with (
                node({**env, "SERVICE_NODE_ID": "a"}, root / "3a") as a,
                node({**env, "SERVICE_NODE_ID": "b"}, root / "3b") as b,
                node({**env, "SERVICE_NODE_ID": "c"}, root / "3c") as c,
            ):
                rate, lat, extra = await measured([a, b, c], args.ops, per_node, args.three_crdts)
        report("three nodes, one hot CRDT: together", lat, extra, rate)
        if "hot" in figures:
            FIGURES["three nodes: ratio"] = {"over_one_node_hot": rate / figures["hot"]}
            print(f"  three nodes / one node (hot) = {rate / figures['hot']:.2f}x")
        if "delivery" not in parts or "spread" not in figures:
            return

        half = figures["spread"] / 2
        print(
            f"cross-node delivery: write on A, SSE on B; A under {half:.0f} ops/s "
            f"(half of its peak), one sampled op every 20 ms"
        )
        with database(pg) as url:
            env = {"DATABASE_URL": url}
            with (
                node({**env, "SERVICE_NODE_ID": "a"}, root / "a") as a,
                node({**env, "SERVICE_NODE_ID": "b"}, root / "b") as b,
            ):
                await asyncio.sleep(0.5)
                lat, done = await delivery_under_load(a, b, half, args.load_seconds, args.crdts)
        report("under load: write->B", lat, f"  (load {done / args.load_seconds:.0f} ops/s)")

        if "rest" not in parts:
            return
        print(f"propagation at rest: one op at a time, {args.samples} samples")
        for wal in (False, True):
            with database(pg) as url:
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
    ap.add_argument("--ops", type=int, default=6000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--crdts", type=int, default=64)
    ap.add_argument("--hot-concurrency", type=int, default=50)
    ap.add_argument("--load-seconds", type=float, default=8.0)
    ap.add_argument("--repeat", type=int, default=3, help="alternating runs per store")
    ap.add_argument("--three-crdts", type=int, default=1, help="CRDTs the three nodes write")
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument(
        "--pg",
        default=os.environ.get("SYNCD_BENCH_PG"),
        help="server URL without a database name (default: a throw-away server)",
    )
    ap.add_argument(
        "--only", help="comma-separated parts: spread, hot, three, delivery, rest (default: all)"
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
