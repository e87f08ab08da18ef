"""The servers of perf.bench.http_ops again, measured with wrk instead of the Python generator.

The Python load generator (perf.lib.loadgen) can saturate before the raw
uvloop peer does, which would flatter every ratio against that peer; wrk
(C, one thread on the load core, perf.lib.wrk) does not. Servers are pinned
to core 0, as in perf.bench.http_ops, and measured closed loop with
``--connections`` connections: the bare h11 peer (GET and POST), the raw
uvloop peer (POST), uvicorn + Starlette with each parser (the increment),
and syncd with each parser (``GET /health/live``, single increments and
100-op batches, ``SERVICE_FSYNC=batch``, a real token), and the same-work peer:
uvicorn + Starlette (httptools) doing syncd's work through syncd's own objects
(perf.peers.starlette_syncd, durable likewise). The figures are keyed as the
suite reads them (``h11_get``, ``syncd_httptools_inc``, ``samework_httptools``,
...). Each also has the server's CPU over the measured run (``server_cpu_s``)
and per answered request (``us_per_request``): issue #35's measure, which
unlike requests/s does not move when other work takes the server's core. There
is no open-loop run: the p99 at half peak needs a scheduled generator, and
stays with perf.bench.http_ops.

Needs wrk on PATH (``apt-get install -y wrk``).

Usage: python -m perf.bench.http_wrk [--duration S] [--connections N] [--warmup S] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from perf.bench.http_ops import BATCH_BODY, OP_BODY, OP_PATH, peer
from perf.lib.servers import SIGNING_KEY, bench_token, process, server_env, syncd
from perf.lib.table import table
from perf.lib.wrk import find_wrk, wrk
from syncd.auth.issue import issue_token
from syncd.auth.tokens import SigningKey

TOKEN_TTL_MS = 3600 * 1000


def run(program: str, duration: float, connections: int, warmup: float) -> dict[str, Any]:
    figs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="syncd-wrk-") as tmp:

        def measure(key: str, port: int, pid: int, **kw: Any) -> None:
            figs[key] = r = wrk(
                program,
                Path(tmp),
                port,
                duration=duration,
                connections=connections,
                warmup=warmup,
                pid=pid,
                **kw,
            )
            print(
                f"  wrk {key:<22} {r['rps']:>10.0f} req/s  p99 {r['p99_ms']} ms"
                f"  server CPU {r['us_per_request']:.1f} us/request"
                f"  wrk CPU {r['generator_cpu']:.0%}  non-2xx {r['non_2xx']}",
                flush=True,
            )

        post: dict[str, Any] = {"path": OP_PATH, "method": "POST", "body": OP_BODY}
        cmd, port = peer("perf.peers.bare_h11")
        with process(cmd, port) as proc:
            measure("h11_get", port, proc.pid, path="/health/live")
            measure("h11_post", port, proc.pid, **post)
        cmd, port = peer("perf.peers.raw_uvloop")
        with process(cmd, port) as proc:
            measure("uvloop_post", port, proc.pid, **post)
        for http in ("h11", "httptools"):
            cmd, port = peer("perf.peers.starlette_app", http)
            with process(cmd, port) as proc:
                measure(f"starlette_{http}", port, proc.pid, **post)
        cmd, port = peer("perf.peers.starlette_syncd", "httptools")
        with tempfile.TemporaryDirectory(prefix="syncd-samework-") as data_dir:
            env = server_env(port, data_dir, SERVICE_FSYNC="batch")
            with process(cmd, port, env) as proc:
                auth = [f"authorization: Bearer {minted_token()}"]
                measure("samework_httptools", port, proc.pid, headers=auth, **post)
        for parser in ("h11", "httptools"):
            with syncd({"SERVICE_HTTP_PARSER": parser, "SERVICE_FSYNC": "batch"}) as (port, proc):
                auth = [f"authorization: Bearer {bench_token(port)}"]
                measure(f"syncd_{parser}_get", port, proc.pid, path="/health/live")
                kw: dict[str, Any] = {"path": OP_PATH, "method": "POST", "headers": auth}
                measure(f"syncd_{parser}_inc", port, proc.pid, body=OP_BODY, **kw)
                measure(f"syncd_{parser}_batch", port, proc.pid, body=BATCH_BODY, **kw)
    return figs


def minted_token() -> str:
    """A bench token signed with the servers' key (the same-work peer has no token route)."""
    return issue_token(
        SigningKey(bytes.fromhex(SIGNING_KEY)),
        namespace="bench",
        client_id=7,
        ttl_ms=TOKEN_TTL_MS,
        rules={"r": [{"p": "*"}], "w": [{"p": "*"}], "rl": 1_000_000},
        now_ms=int(time.time() * 1000),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measurement")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of load first")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    program = find_wrk()
    if program is None:
        print("perf.bench.http_wrk needs wrk on PATH (apt-get install -y wrk)", file=sys.stderr)
        return 2
    figs = run(program, args.duration, args.connections, args.warmup)
    print()
    rows = [
        (
            k,
            f"{f['rps']:.0f}/s",
            f"{f['us_per_request']:.1f} us",
            f"{f['p99_ms']} ms",
            f"{f['generator_cpu']:.0%}",
        )
        for k, f in figs.items()
    ]
    print(table(rows, ("server: workload", "requests", "server CPU/request", "p99", "wrk CPU")))
    if args.json:
        Path(args.json).write_text(json.dumps(figs, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
