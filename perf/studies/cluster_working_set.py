"""Three cluster nodes, each serving a disjoint third of the CRDTs: does each
node's memory follow its own third?

A throw-away PostgreSQL (as perf.bench.pg_store starts one) and three syncd nodes
on it (subprocesses, ``SERVICE_MEMORY_BUDGET_MB`` each). ``--crdts``
gcounters are written over HTTP, CRDT ``i`` on node ``i % 3`` only; then
each node reads its own third back. Measured per node: RSS, the CRDTs it
holds (``service_engine_resident_crdts``) and the notifications it handled.
The same writes go to a single node in a second run, for its RSS with all of
them.

Target (issue #30): each node's RSS follows its own third (about a third of
the data a single node holds with all of it, plus the process's base).

Usage: python -m perf.studies.cluster_working_set [--crdts 30000] [--budget-mb 256] [--pg URL]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from perf.lib.postgres import postgres_server
from perf.lib.proc import rss_mb
from perf.lib.servers import ADMIN, LOAD_CORE, ROOT, free_port, pinned, ready_status, server_env
from perf.studies.working_set import NS, _request
from perf.studies.zipf import metric

START_TIMEOUT_S = 120.0


def crdt_id(i: int) -> str:
    return f"gc:c{i}"


class Node:
    def __init__(self, url: str, name: str, budget_mb: float, core: str, code: Path) -> None:
        self.port = free_port()
        self.data_dir = tempfile.mkdtemp(prefix=f"syncd-{name}-")
        env = {
            **os.environ,
            **server_env(
                self.port,
                self.data_dir,
                DATABASE_URL=url,
                SERVICE_NODE_ID=name,
                SERVICE_RATE_LIMIT="100000000",
                SERVICE_MEMORY_BUDGET_MB=str(budget_mb),
                PYTHONPATH=str(code),
            ),
        }
        self.proc = subprocess.Popen(
            pinned([sys.executable, "-m", "syncd"], core),
            env=env,
            cwd=code,
            stdout=subprocess.DEVNULL,
        )
        started = time.monotonic()
        while ready_status(self.port) != 200:
            if self.proc.poll() is not None:
                raise RuntimeError(f"node {name} exited with {self.proc.returncode}")
            if time.monotonic() - started > START_TIMEOUT_S:
                raise TimeoutError(f"node {name} not ready")
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.data_dir, ignore_errors=True)


async def drive(port: int, ids: list[int], method: str, conns: int = 4) -> None:
    todo = iter(ids)
    body = b'{"op":"increment"}'

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for i in todo:
            if method == "POST":
                head = (
                    f"POST /v1/namespaces/{NS}/crdts/{crdt_id(i)}/ops HTTP/1.1\r\nHost: b\r\n"
                    f"Authorization: Bearer {ADMIN}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n"
                ).encode()
                payload = body
            else:
                head = (
                    f"GET /v1/namespaces/{NS}/crdts/{crdt_id(i)} HTTP/1.1\r\nHost: b\r\n"
                    f"Authorization: Bearer {ADMIN}\r\n\r\n"
                ).encode()
                payload = b""
            status, answer = await _request(reader, writer, head, payload)
            if status != 200:
                raise RuntimeError(f"{method} {crdt_id(i)}: {status} {answer[:200]!r}")
        writer.close()

    await asyncio.gather(*(worker() for _ in range(conns)))


def figures(node: Node) -> dict[str, Any]:
    return {
        "rss_mb": rss_mb(node.proc.pid),
        "resident": metric(node.port, "service_engine_resident_crdts"),
        "notifications": metric(node.port, "service_cluster_notifications_total"),
    }


def run_cluster(
    url: str, crdts: int, budget_mb: float, nodes: int, code: Path
) -> list[dict[str, Any]]:
    cores = os.cpu_count() or 1
    started = [Node(url, f"n{k}", budget_mb, str(k % cores), code) for k in range(nodes)]
    try:
        base = [rss_mb(n.proc.pid) for n in started]
        shares = [[i for i in range(crdts) if i % nodes == k] for k in range(nodes)]

        async def write() -> None:
            await asyncio.gather(
                *(drive(n.port, share, "POST") for n, share in zip(started, shares, strict=True))
            )
            await asyncio.gather(
                *(drive(n.port, share, "GET") for n, share in zip(started, shares, strict=True))
            )

        asyncio.run(write())
        time.sleep(1.0)  # notifications of the last writes reach every node
        return [{"node": k, "base_rss_mb": base[k], **figures(n)} for k, n in enumerate(started)]
    finally:
        for n in started:
            n.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--crdts", type=int, default=30_000)
    parser.add_argument("--budget-mb", type=float, default=256)
    parser.add_argument("--pg", help="an existing server's URL (default: a throw-away one)")
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout to run (default: this)")
    args = parser.parse_args(argv)
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {int(LOAD_CORE)})
    with postgres_server(args.pg) as pg:
        for label, count in (("three nodes, a third each", 3), ("one node, all", 1)):
            db = f"perf_{count}_{os.getpid()}"
            with psycopg.connect(f"{pg}/postgres", autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {db}")
            rows = run_cluster(f"{pg}/{db}", args.crdts, args.budget_mb, count, args.code)
            print(f"{label} ({args.crdts:,} CRDTs):", flush=True)
            for row in rows:
                print(
                    f"  node {row['node']}: RSS {row['rss_mb']:.0f} MB (at start "
                    f"{row['base_rss_mb']:.0f}), {row['resident']:,.0f} CRDTs held, "
                    f"{row['notifications']:,.0f} notifications handled",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
