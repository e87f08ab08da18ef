"""The disk's own fsync latency, with no syncd code in the way.

Appends a small record and fsyncs, in a loop, for ``--seconds``: the same
pattern as one group commit with one record. Prints the latency
distribution and the stalls. Every durable acknowledgement in syncd waits
for one such fsync, so this is the floor under the p99 of any acknowledged
write (``SERVICE_FSYNC=batch``), whatever the server does.

Usage: python -m perf.studies.fsync_latency [--seconds 20] [--dir DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Any

RECORD = b"x" * 170
"""About one gcounter increment's log record."""
STALL_MS = 30.0
"""An fsync slower than this is counted as a stall."""


def measure(directory: str, seconds: float) -> dict[str, Any]:
    path = os.path.join(directory, "fsync-probe.log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    latencies: list[float] = []
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            os.write(fd, RECORD)
            started = time.perf_counter()
            os.fsync(fd)
            latencies.append((time.perf_counter() - started) * 1000)
    finally:
        os.close(fd)
        os.unlink(path)
    latencies.sort()

    def q(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))]

    return {
        "fsyncs": len(latencies),
        "per_s": len(latencies) / seconds,
        "p50_ms": q(0.50),
        "p99_ms": q(0.99),
        "p999_ms": q(0.999),
        "max_ms": latencies[-1],
        "stalls": sum(1 for x in latencies if x > STALL_MS),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--dir", help="a directory on the disk to test (default: a temp dir)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.dir:
        r = measure(args.dir, args.seconds)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            r = measure(tmp, args.seconds)
    if args.json:
        print(json.dumps(r))
        return
    print(
        f"fsync of a {len(RECORD)}-byte append, {r['fsyncs']:,} calls ({r['per_s']:.0f}/s): "
        f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, p99.9 {r['p999_ms']:.1f} ms, "
        f"max {r['max_ms']:.1f} ms, {r['stalls']} stalls over {STALL_MS:.0f} ms"
    )


if __name__ == "__main__":
    main()
