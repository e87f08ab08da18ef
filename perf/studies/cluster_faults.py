"""Three nodes on one PostgreSQL under faults, longer than the test: acknowledged
ops, ops/s and recovery times.

The scenario of tests/cluster/test_faults.py (writers on every node retrying
with the same op_id; a node SIGKILLed and restarted, PostgreSQL restarted, a
node SIGSTOPped) with longer phases and more writers, on a throw-away
PostgreSQL server with production durability (fsync and synchronous_commit
on). Every check of the test runs too: identical state on every node, every
acknowledged op in it exactly once, every subscriber in order to the end.

    .venv/bin/python -m perf.studies.cluster_faults [--writers-per-node 4] [--phase 5] [--stop 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.cluster.faults import run_faults
from tests.conftest import ADMIN, SIGNING_KEY_HEX, Subprocess, wait_ready
from tests.pgserver import throwaway_postgres


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Spawner:
    """``python -m syncd`` nodes, as the tests' spawn_server fixture starts them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[Subprocess] = []

    def __call__(
        self, env: dict[str, str] | None = None, *, port: int | None = None, ready: bool = True
    ) -> Subprocess:
        port = port or free_port()
        full_env = {
            **os.environ,
            "SERVICE_BIND": f"127.0.0.1:{port}",
            "SERVICE_DATA_DIR": str(self.root / "data"),
            "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
            "SERVICE_ADMIN_TOKEN": ADMIN,
            "SERVICE_LOG_LEVEL": "warning",
            **(env or {}),
        }
        log_path = self.root / f"node{len(self.procs)}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "syncd"], env=full_env, stdout=log, stderr=subprocess.STDOUT
            )
        node = Subprocess(proc, port, log_path)
        self.procs.append(node)
        if ready:
            wait_ready(port, proc)
        return node

    def stop_all(self) -> None:
        for node in self.procs:
            if node.proc.poll() is None:
                node.kill()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writers-per-node", type=int, default=4)
    ap.add_argument("--phase", type=float, default=5.0, help="seconds of load between faults")
    ap.add_argument("--stop", type=float, default=10.0, help="seconds a node stays SIGSTOPped")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    durable = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
    with tempfile.TemporaryDirectory() as tmp, throwaway_postgres(durable) as pg:
        spawner = Spawner(Path(tmp))
        try:
            report = asyncio.run(
                run_faults(
                    spawner,
                    pg,
                    writers_per_node=args.writers_per_node,
                    phase_s=args.phase,
                    stop_s=args.stop,
                )
            )
        finally:
            spawner.stop_all()
    print(
        f"acknowledged ops: {report.acked} in {report.seconds:.1f} s ({report.ops_per_s:.0f} ops/s)"
    )
    print(f"retries (connection errors, timeouts, 503s): {report.retries}")
    print("recovery:")
    for name, seconds in report.recovery_s.items():
        print(f"  {name:<48} {seconds * 1000:8.0f} ms")
    print(
        "checks passed: identical state on all nodes, every acknowledged op once, subscribers in order"
    )
    if args.json:
        figures: dict[str, Any] = {
            "acked": report.acked,
            "seconds": report.seconds,
            "ops_per_s": report.ops_per_s,
            "retries": report.retries,
            "recovery_s": report.recovery_s,
        }
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
