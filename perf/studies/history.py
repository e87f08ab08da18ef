"""Reading the past: ``?at=SEQ`` on a CRDT with 100,000 ops, against reading its
current state in the same run, and what the history costs on disk.

A real server (subprocess, fsync batch, default retention unless
``--retention``) gets N ops on each CRDT in batches of 1000 (a counter, and an
RGA typed one character at a time from an editing trace); then, alternating,
GETs of the current state and of ``?at=`` random seqs in the retained range,
over one keep-alive connection. Targets: at=SEQ p50 <= 50 ms and <= 20x the
current read.

Usage: python -m perf.studies.history [--ops 100000] [--reads 200] [--retention 100000ops]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from perf.lib.servers import ROOT, bench_token, syncd

TRACE = ROOT / "tests" / "data" / "traces" / "sveltecomponent.json.gz"
BATCH = 1000


def trace_inserts(n: int) -> list[dict[str, Any]]:
    """Up to n single-character inserts of a real editing trace (deletes skipped)."""
    import gzip

    with gzip.open(TRACE, "rt") as f:
        data = json.load(f)
    out: list[dict[str, Any]] = []
    length = len(data.get("startContent", ""))
    for txn in data["txns"]:
        for pos, delete, text in txn["patches"]:
            if delete or not text:
                continue
            for ch in text:
                if len(out) == n:
                    return out
                index = min(pos, length)
                out.append({"op": "insert", "index": index, "text": ch})
                length += 1
                pos += 1
    return out


class Http:
    def __init__(self, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port)
        self.headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        self.conn.request(method, path, body=data, headers=self.headers)
        response = self.conn.getresponse()
        payload = response.read()
        return response.status, json.loads(payload) if payload else None


def fill(client: Http, crdt_id: str, ops: list[dict[str, Any]]) -> None:
    for start in range(0, len(ops), BATCH):
        status, answer = client.call(
            "POST", f"/v1/namespaces/bench/crdts/{crdt_id}/ops", ops[start : start + BATCH]
        )
        assert status == 200, answer


def timed(client: Http, path: str) -> float:
    started = time.perf_counter()
    status, answer = client.call("GET", path)
    elapsed = time.perf_counter() - started
    assert status == 200, (path, answer)
    return elapsed


def measure(client: Http, crdt_id: str, reads: int, rng: random.Random) -> dict[str, Any]:
    path = f"/v1/namespaces/bench/crdts/{crdt_id}"
    status, page = client.call("GET", f"{path}/history?limit=1")
    assert status == 200, page
    latest, oldest = page["seq"], page["oldest"]
    now: list[float] = []
    past: list[float] = []
    for _ in range(reads):  # alternating: the machine's noise hits both alike
        now.append(timed(client, path))
        past.append(timed(client, f"{path}?at={rng.randint(oldest, latest - 1)}"))
    now.sort()
    past.sort()
    p50_now, p50_past = statistics.median(now), statistics.median(past)
    return {
        "crdt": crdt_id,
        "seq": latest,
        "oldest": oldest,
        "current_p50_ms": round(p50_now * 1000, 3),
        "at_p50_ms": round(p50_past * 1000, 3),
        "at_p99_ms": round(past[int(len(past) * 0.99) - 1] * 1000, 3),
        "ratio_p50": round(p50_past / p50_now, 1),
    }


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--retention", default=None, help="SERVICE_HISTORY_RETENTION")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    rng = random.Random(7)
    env = {"SERVICE_FSYNC": "batch", "SERVICE_RATE_LIMIT": "1000000"}
    if args.retention:
        env["SERVICE_HISTORY_RETENTION"] = args.retention
    with tempfile.TemporaryDirectory(prefix="syncd-history-") as data_dir:
        with syncd(env, data_dir) as (port, _):
            client = Http(port, bench_token(port))
            fill(client, "pn:counter", [{"op": "increment"}] * args.ops)
            fill(client, "rg:doc", trace_inserts(args.ops))
            results = [measure(client, c, args.reads, rng) for c in ("pn:counter", "rg:doc")]
        data = Path(data_dir)
        disk = {part: dir_bytes(data / part) for part in ("log", "snapshots", "history")}
    print(f"history: {args.ops} ops per CRDT, retention {args.retention or 'default (1000ops)'}")
    for r in results:
        ok = r["at_p50_ms"] <= 50 and r["ratio_p50"] <= 20
        print(
            f"  {r['crdt']:<11} seq {r['seq']}, oldest {r['oldest']}: current read p50 "
            f"{r['current_p50_ms']} ms, at=SEQ p50 {r['at_p50_ms']} ms (p99 {r['at_p99_ms']}) = "
            f"{r['ratio_p50']}x  (target <= 50 ms and <= 20x: {'met' if ok else 'NOT met'})"
        )
    print(
        "  disk after the run: "
        + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in disk.items())
        + f"; history / (log + snapshots) = {disk['history'] / max(1, disk['log'] + disk['snapshots']):.2f}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "disk": disk}, indent=2))
    os.sync()


if __name__ == "__main__":
    main()
