"""HTTP ops throughput next to its peers, measured in the same run.

Server pinned to core 0, the load generator (perf.lib.loadgen, a separate
process) to core 1. Workloads:

- GET /health/live on syncd vs the bare h11 fixed-response server (issue 2);
- single gcounter increments (SERVICE_FSYNC=batch) with each parser vs the
  bare h11 server, the raw uvloop server and uvicorn + Starlette (issues 5, 14);
- batches of 100 increments per request: ops/s;
- p99 latency at half of the measured peak rate (open loop), next to the raw
  uvloop server's p99 at the same rate from the same generator (the floor
  that the machine and the generator set).

Usage: python -m perf.bench.http_ops [--duration S] [--connections N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from perf.lib.loadgen import headroom_note, loadgen
from perf.lib.servers import bench_token, free_port, process, syncd
from perf.lib.table import table
from perf.suite.registry import TARGETS

OP_PATH = "/v1/namespaces/bench/crdts/gc:hits/ops"
OP_BODY = '{"op":"increment","amount":1}'
BATCH_OPS = 100
BATCH_BODY = "[" + ",".join([OP_BODY] * BATCH_OPS) + "]"


def peer(module: str, *extra: str) -> tuple[list[str], int]:
    port = free_port()
    return [sys.executable, "-m", module, str(port), *extra], port


def run(duration: float, connections: int) -> dict[str, Any]:
    results: dict[str, Any] = {}

    def measure(name: str, port: int, **kw: Any) -> dict[str, Any]:
        r = loadgen(port, duration=duration, connections=connections, **kw)
        results[name] = r
        print(
            f"  {name:<38} {r['rps']:>10.0f} req/s  p99 {r['p99_ms']:.2f} ms  {headroom_note(r)}  {r['statuses']}",
            flush=True,
        )
        return r

    cmd, port = peer("perf.peers.bare_h11")
    with process(cmd, port):
        measure("bare h11: GET", port, path="/health/live")
        measure("bare h11: POST", port, path=OP_PATH, method="POST", body=OP_BODY)
    cmd, port = peer("perf.peers.raw_uvloop")
    with process(cmd, port):
        measure("raw uvloop: POST", port, path=OP_PATH, method="POST", body=OP_BODY)
    for http in ("h11", "httptools"):
        cmd, port = peer("perf.peers.starlette_app", http)
        with process(cmd, port):
            measure(
                f"uvicorn+starlette ({http}): increment",
                port,
                path=OP_PATH,
                method="POST",
                body=OP_BODY,
            )
    for parser in ("h11", "httptools"):
        with syncd({"SERVICE_HTTP_PARSER": parser, "SERVICE_FSYNC": "batch"}) as (port, _):
            auth = f"authorization: Bearer {bench_token(port)}"
            measure(f"syncd ({parser}): GET /health/live", port, path="/health/live")
            peak = measure(
                f"syncd ({parser}): increment",
                port,
                path=OP_PATH,
                method="POST",
                body=OP_BODY,
                headers=[auth],
            )
            batch = measure(
                f"syncd ({parser}): 100-op batch",
                port,
                path=OP_PATH,
                method="POST",
                body=BATCH_BODY,
                headers=[auth],
            )
            results[f"syncd ({parser}): batched ops/s"] = batch["rps"] * BATCH_OPS
            half = measure(
                f"syncd ({parser}): increment @ half peak",
                port,
                path=OP_PATH,
                method="POST",
                body=OP_BODY,
                headers=[auth],
                rate=peak["rps"] / 2,
            )
            results[f"syncd ({parser}): p99 @ half peak"] = half["p99_ms"]
        # The machine's own floor at that rate: the raw uvloop server (no
        # parsing, no work) driven by the same open-loop generator. On a
        # shared VM its p99 moves with everything else running.
        cmd, port = peer("perf.peers.raw_uvloop")
        with process(cmd, port):
            measure(
                f"raw uvloop: POST @ syncd ({parser}) half peak",
                port,
                path=OP_PATH,
                method="POST",
                body=OP_BODY,
                rate=half["rps"],
            )
    return results


def summarize(r: dict[str, Any]) -> str:
    """The figures as the suite's rows put them, against the same targets (perf.suite.registry)."""

    def rps(key: str) -> float:
        return float(r[key]["rps"])

    def target(key: str) -> str:
        return str(TARGETS[f"http.{key}"])

    rows = []
    for parser in ("h11", "httptools"):
        inc = rps(f"syncd ({parser}): increment")
        rows += [
            (
                f"GET /health/live ({parser})",
                f"{rps(f'syncd ({parser}): GET /health/live'):.0f}/s",
                "bare h11 GET",
                f"{rps('bare h11: GET'):.0f}/s",
                f"{rps(f'syncd ({parser}): GET /health/live') / rps('bare h11: GET'):.2f}x",
                target("get-h11/bare-h11") if parser == "h11" else "",
            ),
            (
                f"increment ({parser})",
                f"{inc:.0f}/s",
                "bare h11 POST",
                f"{rps('bare h11: POST'):.0f}/s",
                f"{inc / rps('bare h11: POST'):.2f}x",
                target("increment-h11/bare-h11") if parser == "h11" else "",
            ),
            (
                f"increment ({parser})",
                f"{inc:.0f}/s",
                "raw uvloop POST",
                f"{rps('raw uvloop: POST'):.0f}/s",
                f"{inc / rps('raw uvloop: POST'):.2f}x",
                target("increment-httptools/raw-uvloop") if parser == "httptools" else "",
            ),
            (
                f"increment ({parser})",
                f"{inc:.0f}/s",
                f"starlette ({parser})",
                f"{rps(f'uvicorn+starlette ({parser}): increment'):.0f}/s",
                f"{inc / rps(f'uvicorn+starlette ({parser}): increment'):.2f}x",
                target(f"increment-{parser}/starlette"),
            ),
            (
                f"100-op batches ({parser})",
                f"{r[f'syncd ({parser}): batched ops/s']:.0f} ops/s",
                "",
                "",
                "",
                target("batch-ops"),
            ),
            (
                f"p99 at half peak ({parser})",
                f"{r[f'syncd ({parser}): p99 @ half peak']:.2f} ms",
                "raw uvloop, same rate",
                f"{r[f'raw uvloop: POST @ syncd ({parser}) half peak']['p99_ms']:.2f} ms",
                "",
                target("p99-at-half-peak"),
            ),
        ]
    return table(rows, ("workload", "syncd", "peer", "peer figure", "ratio", "target"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--json")
    args = parser.parse_args()
    results = run(args.duration, args.connections)
    print()
    print(summarize(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
