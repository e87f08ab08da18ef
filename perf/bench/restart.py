"""Restart time: ``python -m syncd`` from exec to /health/ready answering 200.

The data directory holds ``--ops`` gcounter increments over ``--crdts``
CRDTs. It is built without HTTP: a real :class:`~syncd.crdt.engine.Engine`
plans and applies the ops (batches of ``BATCH_OPS`` on each CRDT in turn,
from ``CLIENTS`` different client ids) and its records go straight into a
:class:`~syncd.store.filestore.FileStore` (fsync=never, no automatic
snapshot). Two directories are written side by side from the same records:
one keeps the whole history in the log; the other then takes a snapshot of
the engine (the snapshot the server itself would write), which compacts the
log behind it.

Each restart is timed from just before ``exec`` to the first 200 from
/health/ready (the server binds its socket only once the state is loaded);
then one CRDT is read back to check the state arrived whole. Best of
``--repeat`` starts per directory, the server pinned to core 0. Target: <= 5 s.

Usage: python -m perf.bench.restart [--ops 1000000] [--crdts 10000] [--repeat 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

import uvloop

from perf.lib.proc import cpu_seconds, rss_mb
from perf.lib.servers import (
    ADMIN,
    ROOT,
    SERVER_CORE,
    SIGNING_KEY,
    free_port,
    pinned,
    ready_status,
    stop,
)
from perf.suite.registry import TARGETS
from syncd.crdt.engine import Engine
from syncd.store.embedded.store import FileStore

NS = "bench"
TARGET = TARGETS["restart.ready"]
BATCH_OPS = 10
"""Ops per plan+apply: 1M ops cost 100k engine calls instead of 1M."""
CLIENTS = 50
"""Distinct writers, so each gcounter holds several clients' counts."""
CHUNK_RECORDS = 5000
"""Records per store append while building."""
POLL_S = 0.005
"""Readiness poll interval: the resolution of the figure."""
START_TIMEOUT_S = 300.0


def dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, name)) for name in files)
    return total


async def build(log_dir: str, snap_dir: str, ops: int, crdts: int) -> dict[str, Any]:
    """Write the same history into both directories; snapshot the second."""
    if ops % (crdts * BATCH_OPS):
        raise SystemExit(f"--ops must be a multiple of --crdts x {BATCH_OPS}")
    engine = Engine()
    never_snapshot = 1 << 62
    stores = [
        FileStore(d, fsync="never", snapshot_every_bytes=never_snapshot)
        for d in (log_dir, snap_dir)
    ]
    for store in stores:
        await store.open()
    started = time.perf_counter()
    batch = [{"op": "increment", "amount": 1}] * BATCH_OPS
    chunk: list[dict[str, Any]] = []
    written = 0
    for rnd in range(ops // (crdts * BATCH_OPS)):
        for c in range(crdts):
            plan = engine.plan(NS, f"gc:c{c}", batch)
            chunk += engine.apply(plan, 1000 + (c + rnd) % CLIENTS).records
            if len(chunk) >= CHUNK_RECORDS:
                for store in stores:
                    await store.append(chunk)
                written += len(chunk)
                chunk = []
    if chunk:
        for store in stores:
            await store.append(chunk)
        written += len(chunk)
    log_stats = stores[0].stats
    stores[1].set_snapshot_source(engine.export_entries)
    await stores[1].compact_now()
    took = time.perf_counter() - started
    for store in stores:
        await store.close()
    return {
        "ops": written,
        "crdts": crdts,
        "build_s": took,
        "log_bytes": dir_bytes(os.path.join(log_dir, "log")),
        "log_bytes_per_op": log_stats.bytes_written / max(log_stats.records_written, 1),
        "snapshot_bytes": dir_bytes(os.path.join(snap_dir, "snapshots")),
        "snapshot_dir_log_bytes": dir_bytes(os.path.join(snap_dir, "log")),
        "expected_value": ops // crdts,
    }


def read_value(port: int, crdt_id: str) -> int:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/namespaces/{NS}/crdts/{crdt_id}",
        headers={"authorization": f"Bearer {ADMIN}"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return int(json.load(resp)["value"])


def time_start(data_dir: str, expected: int, crdts: int) -> dict[str, Any]:
    port = free_port()
    env = {
        **os.environ,
        "SERVICE_BIND": f"127.0.0.1:{port}",
        "SERVICE_DATA_DIR": data_dir,
        "SERVICE_ADMIN_TOKEN": ADMIN,
        "SERVICE_SIGNING_KEY": SIGNING_KEY,
        "SERVICE_LOG_LEVEL": "warning",
    }
    cmd = pinned([sys.executable, "-m", "syncd"], SERVER_CORE)
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    try:
        while True:
            status = ready_status(port)
            if status == 200:
                took = time.perf_counter() - started
                break
            if proc.poll() is not None:
                raise RuntimeError(f"syncd exited with {proc.returncode} before it was ready")
            if time.perf_counter() - started > START_TIMEOUT_S:
                raise TimeoutError(f"not ready after {START_TIMEOUT_S} s")
            time.sleep(POLL_S)
        rss = rss_mb(proc.pid)
        cpu = cpu_seconds(proc.pid)  # taskset execs the server: same pid
        values = {read_value(port, f"gc:c{c}") for c in (0, crdts // 2, crdts - 1)}
        if values != {expected}:
            raise RuntimeError(f"restarted state is wrong: values {values}, expected {expected}")
        return {"seconds": took, "cpu_s": cpu, "rss_mb": rss}
    finally:
        stop(proc, 30)


def run(ops: int, crdts: int, repeat: int) -> dict[str, Any]:
    base = tempfile.mkdtemp(prefix="syncd-restart-")
    try:
        log_dir = os.path.join(base, "log-only")
        snap_dir = os.path.join(base, "snapshot")
        built = uvloop.run(build(log_dir, snap_dir, ops, crdts))
        print(
            f"  built {built['ops']:,} ops over {crdts:,} CRDTs in {built['build_s']:.1f} s:"
            f" log {built['log_bytes'] / 1e6:.1f} MB ({built['log_bytes_per_op']:.1f} B/op),"
            f" snapshot {built['snapshot_bytes'] / 1e6:.2f} MB",
            flush=True,
        )
        result: dict[str, Any] = {**built, "target_s": TARGET.value}
        for name, data_dir in (("without_snapshot", log_dir), ("with_snapshot", snap_dir)):
            starts = []
            for _ in range(repeat):
                starts.append(time_start(data_dir, built["expected_value"], crdts))
                print(
                    f"  restart {name.replace('_', ' ')}: {starts[-1]['seconds']:.2f} s"
                    f" (server CPU {starts[-1]['cpu_s']:.2f} s, RSS {starts[-1]['rss_mb']:.0f} MB)",
                    flush=True,
                )
            with contextlib.suppress(OSError):
                if name == "without_snapshot" and os.listdir(os.path.join(data_dir, "snapshots")):
                    print("  note: the server took a snapshot of the log-only directory")
            result[name] = {
                "seconds": min(s["seconds"] for s in starts),
                "runs": [s["seconds"] for s in starts],
                "cpu_s": min(s["cpu_s"] for s in starts),
                "rss_mb": max(s["rss_mb"] for s in starts),
            }
        return result
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--crdts", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3, help="starts per directory (best kept)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.crdts < 1:
        parser.error("--repeat and --crdts must be >= 1")
    r = run(args.ops, args.crdts, args.repeat)
    print(
        f"restart with {r['ops']:,} ops over {r['crdts']:,} CRDTs: "
        f"{r['without_snapshot']['seconds']:.2f} s from the log alone, "
        f"{r['with_snapshot']['seconds']:.2f} s with a snapshot (target {TARGET})"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
