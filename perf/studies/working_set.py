"""Cost follows the working set: restart time, memory and cold reads with many CRDTs.

A real server (subprocess, pinned to core 0, ``SERVICE_MEMORY_BUDGET_MB``)
is given ``--crdts`` CRDTs over HTTP (one op each; every 50th an rga text of
2,000 characters, the rest gcounters), from ``--conns`` keep-alive
connections on core 1. Then it is stopped (SIGTERM) and started again on the
same data directory, and measured:

- restart: from exec to the first 200 of /health/ready;
- RSS right after, and the peak RSS during ``--reads`` random cold reads
  (sampled every 50 ms from /proc);
- the cold reads' latency (p50, p99), one keep-alive connection;
- the data directory's size on disk.

``--code DIR`` runs the server from another checkout (for a side-by-side run
of two commits: ``git worktree add ../before <commit>``); ``--compare DIR``
runs both, alternating the restarts (``--rounds``), and prints the ratios.

Targets (issue #30, at 1,000,000 CRDTs, budget 256 MB): restart <= 1 s, RSS
<= 1.5x the budget at any time, cold read p99 <= 5 ms, disk no more than
before.

Usage: python -m perf.studies.working_set [--crdts 100000] [--budget-mb 256] [--reads 10000]
       [--compare ../before] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perf.lib.checkouts import checkouts
from perf.lib.proc import rss_mb
from perf.lib.servers import (
    ADMIN,
    LOAD_CORE,
    ROOT,
    SERVER_CORE,
    SIGNING_KEY,
    free_port,
    pinned,
    ready_status,
)

NS = "bench"
RGA_EVERY = 50
"""Every 50th CRDT is a text (the issue's mix)."""
RGA_TEXT = "x" * 2000
START_TIMEOUT_S = 600.0


def crdt_id(i: int) -> str:
    return f"rg:t{i}" if i % RGA_EVERY == 0 else f"gc:c{i}"


def body(i: int) -> bytes:
    if i % RGA_EVERY == 0:
        return json.dumps({"op": "insert", "index": 0, "text": RGA_TEXT}).encode()
    return b'{"op":"increment"}'


def dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


class Server:
    """One syncd process on a data directory, from a checkout."""

    def __init__(self, code: Path, data_dir: str, budget_mb: float) -> None:
        self.code = code
        self.data_dir = data_dir
        self.budget_mb = budget_mb
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        env = {
            **os.environ,
            "PYTHONPATH": str(self.code),
            "SERVICE_BIND": f"127.0.0.1:{self.port}",
            "SERVICE_DATA_DIR": self.data_dir,
            "SERVICE_ADMIN_TOKEN": ADMIN,
            "SERVICE_SIGNING_KEY": SIGNING_KEY,
            "SERVICE_LOG_LEVEL": "warning",
            "SERVICE_RATE_LIMIT": "100000000",
            "SERVICE_MEMORY_BUDGET_MB": str(self.budget_mb),
        }
        cmd = pinned([sys.executable, "-m", "syncd"], SERVER_CORE)
        started = time.perf_counter()
        self.proc = subprocess.Popen(cmd, env=env, cwd=self.code, stdout=subprocess.DEVNULL)
        while ready_status(self.port) != 200:
            if self.proc.poll() is not None:
                raise RuntimeError(f"syncd exited with {self.proc.returncode}")
            if time.perf_counter() - started > START_TIMEOUT_S:
                raise TimeoutError("not ready")
            time.sleep(0.005)
        return time.perf_counter() - started

    @property
    def rss(self) -> float:
        assert self.proc is not None
        return rss_mb(self.proc.pid)

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class PeakRss:
    """The highest RSS of a process while it runs (sampled)."""

    def __init__(self, server: Server, every_s: float = 0.05) -> None:
        self.peak = 0.0
        self._server = server
        self._every = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._server.proc is not None:
                try:
                    self.peak = max(self.peak, self._server.rss)
                except (FileNotFoundError, ProcessLookupError):
                    return
            self._stop.wait(self._every)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def _request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, payload: bytes
) -> tuple[int, bytes]:
    writer.write(head + payload)
    line = await reader.readuntil(b"\r\n")
    status = int(line[9:12])
    length = 0
    while True:
        header = await reader.readuntil(b"\r\n")
        if header == b"\r\n":
            break
        if header.lower().startswith(b"content-length:"):
            length = int(header.split(b":")[1])
    return status, await reader.readexactly(length)


async def write_all(
    port: int,
    crdts: int,
    conns: int,
    ident: Callable[[int], str] = crdt_id,
    make_body: Callable[[int], bytes] = body,
) -> float:
    """One op on each CRDT from ``conns`` connections; ops/s."""
    counter = iter(range(crdts))

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for i in counter:
            payload = make_body(i)
            head = (
                f"POST /v1/namespaces/{NS}/crdts/{ident(i)}/ops HTTP/1.1\r\nHost: b\r\n"
                f"Authorization: Bearer {ADMIN}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n"
            ).encode()
            status, answer = await _request(reader, writer, head, payload)
            if status != 200:
                raise RuntimeError(f"op {i}: {status} {answer[:200]!r}")
        writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(conns)))
    return crdts / (time.perf_counter() - started)


async def cold_reads(port: int, crdts: int, reads: int, seed: int) -> list[float]:
    """``reads`` GETs of random CRDTs over one connection; each one's seconds."""
    rng = random.Random(seed)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    out: list[float] = []
    for _ in range(reads):
        i = rng.randrange(crdts)
        head = (
            f"GET /v1/namespaces/{NS}/crdts/{crdt_id(i)} HTTP/1.1\r\nHost: b\r\n"
            f"Authorization: Bearer {ADMIN}\r\n\r\n"
        ).encode()
        started = time.perf_counter()
        status, answer = await _request(reader, writer, head, b"")
        out.append(time.perf_counter() - started)
        if status != 200:
            raise RuntimeError(f"read {crdt_id(i)}: {status} {answer[:200]!r}")
        if i % RGA_EVERY and json.loads(answer)["value"] != 1:
            raise RuntimeError(f"read {crdt_id(i)}: wrong value {answer[:200]!r}")
    writer.close()
    return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def build(code: Path, data_dir: str, crdts: int, budget_mb: int, conns: int) -> dict[str, Any]:
    server = Server(code, data_dir, budget_mb)
    server.start()
    try:
        with PeakRss(server) as peak:
            rate = asyncio.run(write_all(server.port, crdts, conns))
        rss = server.rss
    finally:
        server.stop()
    return {"write_ops_s": rate, "rss_after_writes_mb": rss, "peak_rss_writes_mb": peak.peak}


def restart(code: Path, data_dir: str, crdts: int, budget_mb: int, reads: int) -> dict[str, Any]:
    server = Server(code, data_dir, budget_mb)
    with PeakRss(server) as peak:
        took = server.start()
        try:
            rss_ready = server.rss
            times = asyncio.run(cold_reads(server.port, crdts, reads, seed=7))
            rss_after = server.rss
        finally:
            server.stop()
    return {
        "restart_s": took,
        "rss_ready_mb": rss_ready,
        "rss_after_reads_mb": rss_after,
        "peak_rss_mb": peak.peak,
        "read_p50_ms": _pct(times, 0.5) * 1000,
        "read_p99_ms": _pct(times, 0.99) * 1000,
        "disk_mb": dir_bytes(data_dir) / 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--crdts", type=int, default=100_000)
    parser.add_argument("--budget-mb", type=int, default=256)
    parser.add_argument("--reads", type=int, default=10_000)
    parser.add_argument("--conns", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout to run (default: this)")
    parser.add_argument("--compare", type=Path, help="another checkout to run side by side")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {int(LOAD_CORE)})  # the server has core 0
    codes = checkouts(args.code, args.compare)
    base = tempfile.mkdtemp(prefix="syncd-working-set-")
    results: dict[str, Any] = {}
    try:
        dirs = {name: os.path.join(base, name) for name in codes}
        for name, code in codes.items():
            built = build(code, dirs[name], args.crdts, args.budget_mb, args.conns)
            results[name] = {"build": built, "restarts": []}
            print(
                f"{name}: wrote {args.crdts:,} CRDTs at {built['write_ops_s']:,.0f} ops/s, "
                f"RSS {built['rss_after_writes_mb']:.0f} MB (peak {built['peak_rss_writes_mb']:.0f})",
                flush=True,
            )
        for _ in range(args.rounds):
            for name, code in codes.items():
                r = restart(code, dirs[name], args.crdts, args.budget_mb, args.reads)
                results[name]["restarts"].append(r)
                print(
                    f"{name}: restart {r['restart_s']:.2f} s, RSS ready {r['rss_ready_mb']:.0f} MB, "
                    f"after {args.reads:,} cold reads {r['rss_after_reads_mb']:.0f} MB "
                    f"(peak {r['peak_rss_mb']:.0f}), read p50 {r['read_p50_ms']:.2f} ms "
                    f"p99 {r['read_p99_ms']:.2f} ms, disk {r['disk_mb']:.0f} MB",
                    flush=True,
                )
        if args.compare is not None:
            best = {
                name: {
                    key: min(r[key] for r in results[name]["restarts"])
                    for key in ("restart_s", "peak_rss_mb", "read_p99_ms", "disk_mb")
                }
                for name in codes
            }
            for key in ("restart_s", "peak_rss_mb", "read_p99_ms", "disk_mb"):
                ratio = best["after"][key] / best["before"][key]
                print(
                    f"  {key}: before {best['before'][key]:.2f}, after {best['after'][key]:.2f}"
                    f" ({ratio:.2f}x)"
                )
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
