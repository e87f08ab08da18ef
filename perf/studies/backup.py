"""What an online backup costs the writes it runs beside.

A real server (subprocess pinned to core 0, fsync batch, its data directory
on the machine's disk) is filled to ``--size-mb`` of data directory (LWW
registers holding 16 KiB values: snapshot, log and history all grow). Then
``--writers`` HTTP writers from perf.lib.loadgen (core 1) send PN-counter
increments, closed loop, for the whole measurement. Each round, in turn:

* a quiet window of ``--window`` seconds with no backup;
* a backup, timed: with ``--sink cli`` (the default) ``syncd backup DEST``
  (POST /v1/admin/backup, unpack the tar, fsync, verify) into a directory on
  the same disk; with ``--sink discard`` the tar from POST /v1/admin/backup
  read and dropped, which is the server's own cost when the backup goes to
  another disk or host;
* another quiet window.

Write throughput in a window is the growth of ``wal_last_seq`` (one record
per increment, acknowledged only once durable) over its wall time, sampled
from /health/ready. The ratio compares the backup's window with the mean of
the quiet windows on either side of it, so drift in the machine's load hits
both alike. Target: >= 0.8x.

Usage: python -m perf.studies.backup [--size-mb 1024] [--writers 32] [--window 10] [--rounds 3]
                            [--sink cli|discard] [--max-rate MIB_S]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from perf.lib.servers import ADMIN, LOAD_CORE, ROOT, bench_token, pinned, syncd
from perf.lib.table import table

VALUE_BYTES = 16 * 1024
FILL_BATCH = 48  # ops per POST: under the 1 MiB default body limit
SET_ELEMENTS = 480  # per OR-set, so no one CRDT's snapshot entry is huge
OP_PATH = "/v1/namespaces/bench/crdts/pn:load/ops"
OP_BODY = '{"op":"increment","amount":1}'
TARGET_RATIO = 0.80


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def wal_last_seq(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/ready", timeout=30) as resp:
        return int(json.load(resp)["wal_last_seq"])


def fill(port: int, token: str, data_dir: Path, size_bytes: int) -> int:
    """OR-sets of incompressible elements until the directory holds size_bytes."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    elements = 0
    while True:
        for _ in range(16):
            ops = [
                {"op": "add", "element": os.urandom(VALUE_BYTES // 2).hex()}
                for _ in range(FILL_BATCH)
            ]
            path = f"/v1/namespaces/bench/crdts/or:s{elements // SET_ELEMENTS}/ops"
            conn.request("POST", path, body=json.dumps(ops), headers=headers)
            response = conn.getresponse()
            answer = response.read()
            assert response.status == 200, answer
            elements += FILL_BATCH
        if dir_bytes(data_dir) >= size_bytes:
            conn.close()
            return elements


def window(port: int, seconds: float) -> tuple[int, float]:
    seq0, t0 = wal_last_seq(port), time.perf_counter()
    time.sleep(seconds)
    return wal_last_seq(port) - seq0, time.perf_counter() - t0


DISCARD = """
import sys, urllib.request
request = urllib.request.Request(sys.argv[1], method="POST", data=b"",
                                 headers={"authorization": "Bearer " + sys.argv[2]})
total = 0
with urllib.request.urlopen(request, timeout=900) as response:
    while chunk := response.read(1 << 20):
        total += len(chunk)
print(total)
"""


def backup(port: int, dest: Path, sink: str, max_rate: float | None) -> tuple[int, float, int]:
    seq0, t0 = wal_last_seq(port), time.perf_counter()
    url = f"http://127.0.0.1:{port}/v1/admin/backup"
    if max_rate is not None:
        url += f"?max_rate={max_rate:g}"
    if sink == "discard":
        command = [sys.executable, "-c", DISCARD, url, ADMIN]
    else:
        command = [
            sys.executable,
            "-m",
            "syncd",
            "backup",
            str(dest),
            "--url",
            f"http://127.0.0.1:{port}",
            "--token",
            ADMIN,
            *(["--max-rate", f"{max_rate:g}"] if max_rate is not None else []),
        ]
    done = subprocess.run(
        pinned(command, LOAD_CORE),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"syncd backup failed: {done.stdout}{done.stderr}")
    copied = int(done.stdout) if sink == "discard" else dir_bytes(dest)
    return wal_last_seq(port) - seq0, elapsed, copied


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--writers", type=int, default=32)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sink", choices=("cli", "discard"), default="cli")
    parser.add_argument("--max-rate", type=float, help="MiB/s (syncd backup --max-rate)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="syncd-backup-bench-"))
    data_dir = base / "data"
    rows: list[dict[str, Any]] = []
    try:
        with syncd({"SERVICE_FSYNC": "batch"}, str(data_dir)) as (port, _):
            token = bench_token(port)
            t0 = time.perf_counter()
            elements = fill(port, token, data_dir, args.size_mb * 1024 * 1024)
            size = dir_bytes(data_dir)
            print(
                f"filled {size / 2**20:.0f} MiB ({elements} set elements of {VALUE_BYTES} B) "
                f"in {time.perf_counter() - t0:.0f} s"
            )
            duration = args.rounds * (2 * args.window + 300) + 60
            load = subprocess.Popen(
                pinned(
                    [
                        sys.executable,
                        "-m",
                        "perf.lib.loadgen",
                        "--port",
                        str(port),
                        "--path",
                        OP_PATH,
                        "--method",
                        "POST",
                        "--body",
                        OP_BODY,
                        "--header",
                        f"authorization: Bearer {token}",
                        "--connections",
                        str(args.writers),
                        "--duration",
                        str(duration),
                        "--warmup",
                        "0",
                    ],
                    LOAD_CORE,
                ),
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
            )
            try:
                time.sleep(3)  # connections up, caches warm
                for n in range(args.rounds):
                    before = window(port, args.window)
                    dest = base / f"backup-{n}"
                    during_ops, during_s, copied = backup(port, dest, args.sink, args.max_rate)
                    after = window(port, args.window)
                    shutil.rmtree(dest, ignore_errors=True)
                    quiet = (before[0] + after[0]) / (before[1] + after[1])
                    during = during_ops / during_s
                    rows.append(
                        {
                            "round": n + 1,
                            "backup_s": round(during_s, 1),
                            "backup_mib": round(copied / 2**20),
                            "quiet_ops_s": round(quiet),
                            "during_ops_s": round(during),
                            "ratio": round(during / quiet, 2),
                        }
                    )
                    print(
                        f"  round {n + 1}: backup of {copied / 2**20:.0f} MiB took "
                        f"{during_s:.1f} s; writes {during:,.0f}/s during it, "
                        f"{quiet:,.0f}/s without = {during / quiet:.2f}x"
                    )
            finally:
                load.terminate()
                load.wait(30)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    ratios = sorted(r["ratio"] for r in rows)
    median = ratios[len(ratios) // 2]
    print(
        table(
            [
                [
                    r[k]
                    for k in (
                        "round",
                        "backup_mib",
                        "backup_s",
                        "quiet_ops_s",
                        "during_ops_s",
                        "ratio",
                    )
                ]
                for r in rows
            ],
            ["round", "MiB", "backup s", "writes/s quiet", "writes/s in backup", "ratio"],
        )
    )
    verdict = "met" if median >= TARGET_RATIO else "NOT met"
    print(
        f"backups to {args.sink}: median ratio {median:.2f}x (target >= {TARGET_RATIO}x: {verdict})"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "median_ratio": median}, indent=2))


if __name__ == "__main__":
    main()
