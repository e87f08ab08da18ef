"""CPU per durable op: syncd's HTTP ops, 100-op batches and WebSocket ops, and the peers.

Issue #35 point 2 asks for the server's CPU per op, not its requests/s: a
figure that does not move when the machine's other work takes the core (it
moves with the CPU's speed, so compare only within one run). Every server
runs alone, pinned to core 0 (``taskset``); its load runs on core 1: wrk (C,
one thread, ``--connections`` connections, closed loop) for HTTP, this
process for the WebSocket. A figure is the server's CPU time (user + system,
every thread, from ``/proc/PID/stat``) over the measured run divided by what
it answered in it: microseconds of CPU per request, or per op.

What runs (``SERVICE_FSYNC=batch``: every answer is durable; httptools; a
real token, rate-limited like any):

- ``syncd``: single gcounter increments (``POST .../ops``); 100-op batches
  (per op); WebSocket ops (one connection keeping ``--window`` single-op
  messages in flight, as ``perf.bench.ws_ingest``; per acknowledged op);
- ``raw uvloop``: a protocol answering fixed bytes (``perf.peers.raw_uvloop``),
  the machine's floor per request;
- ``starlette in memory``: uvicorn + Starlette counting in a dict, no auth,
  no disk (``perf.peers.starlette_app``);
- ``starlette same work``: uvicorn + Starlette doing syncd's work through
  syncd's own objects (``perf.peers.starlette_syncd``), durable likewise.

``--compare DIR`` runs another checkout's syncd (``git worktree add
../before <commit>``) alternately with this one's, which goes first every
other round; the peers run once a round, from this checkout. The summary is
the median of the rounds, after/before, and each peer's CPU per request over
syncd's (how many times syncd's work per request the peer spends).

Usage: python -m perf.studies.op_cpu [--rounds N] [--duration S] [--connections N]
       [--only syncd,peers] [--compare DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvloop

from perf.bench.http_ops import BATCH_BODY, BATCH_OPS, OP_BODY, OP_PATH
from perf.bench.ws_fanout import RawWs, message, open_clients
from perf.lib.checkouts import checkouts
from perf.lib.proc import cpu_seconds
from perf.lib.servers import (
    LOAD_CORE,
    ROOT,
    SERVER_CORE,
    SIGNING_KEY,
    free_port,
    pinned,
    process,
    server_env,
)
from perf.lib.table import table
from perf.lib.wrk import WRK_THREADS, find_wrk, parse_wrk, wrk_lua
from syncd.auth.issue import issue_token
from syncd.auth.tokens import SigningKey

NS = "bench"
"""The namespace of OP_PATH."""
WS_CRDT = "gc:ws"
TOKEN_TTL_MS = 24 * 3600 * 1000
RATE_LIMIT = 1_000_000
"""Requests per second a token may make: the largest a token may carry, far
above what one core answers, so the limit is checked on every request and
never refuses one."""
ACK_MARK = b"\xa3ack"
"""msgpack of the string "ack": in every acknowledgement, in no error."""


def token() -> str:
    """A token for NS, minted with the servers' signing key (the same-work
    peer has no token route)."""
    return issue_token(
        SigningKey(bytes.fromhex(SIGNING_KEY)),
        namespace=NS,
        client_id=7,
        ttl_ms=TOKEN_TTL_MS,
        rules={"r": [{"p": "*"}], "w": [{"p": "*"}], "rl": RATE_LIMIT},
        now_ms=int(time.time() * 1000),
    )


@contextlib.contextmanager
def running(
    cmd: list[str], code: Path, env: dict[str, str] | None = None
) -> Iterator[tuple[int, int]]:
    """``cmd PORT`` (a peer) or ``python -m syncd`` (``cmd`` empty) from the
    checkout ``code`` on the server core; its port and pid."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="syncd-opcpu-") as data_dir:
        full = {
            **server_env(port, data_dir, SERVICE_FSYNC="batch", SERVICE_HTTP_PARSER="httptools"),
            **(env or {}),
            "PYTHONPATH": str(code),
        }
        argv = [sys.executable, "-m", "syncd"] if not cmd else [*cmd, str(port)]
        with process(argv, port, full, SERVER_CORE, cwd=code) as proc:
            yield port, proc.pid


def wrk_cpu(
    program: str,
    port: int,
    pid: int,
    *,
    body: str,
    headers: list[str],
    duration: float,
    warmup: float,
    connections: int,
) -> dict[str, Any]:
    """One warm-up wrk run, then a measured one: requests/s, the server's CPU
    seconds over the measured run, and its CPU per request."""
    with tempfile.TemporaryDirectory(prefix="syncd-opcpu-wrk-") as tmp:
        script = Path(tmp) / "request.lua"
        wrk_lua(script, "POST", body, headers)
        url = f"http://127.0.0.1:{port}{OP_PATH}"

        def once(seconds: float) -> str:
            cmd = [program, f"-t{WRK_THREADS}", f"-c{connections}", f"-d{max(1, round(seconds))}s"]
            out = subprocess.run(
                pinned([*cmd, "--latency", "-s", str(script), url], LOAD_CORE),
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            return out

        if warmup > 0:  # wrk runs a second at least: --warmup 0 skips it
            once(warmup)
        cpu0 = cpu_seconds(pid)
        out = once(duration)
        cpu = cpu_seconds(pid) - cpu0
    figures = parse_wrk(out)
    done = re.search(r"(\d+) requests in", out)
    if done is None:
        raise RuntimeError(f"wrk printed no request count:\n{out}")
    requests = int(done.group(1))
    return {
        **figures,
        "requests": requests,
        "cpu_s": cpu,
        "us_per_request": cpu / max(requests, 1) * 1e6,
    }


async def ws_ops(
    port: int, bearer: str, window: int, warmup: float, duration: float, pid: int
) -> dict[str, Any]:
    """One WebSocket keeping ``window`` single-op messages in flight: acks/s and
    the server's CPU per acknowledged op over the measured run."""
    counts = {"acks": 0, "errors": 0}
    op = message({"kind": "op", "id": WS_CRDT, "op": {"op": "increment"}, "ref": 0})
    client: list[RawWs] = []

    def on_frame(opcode: int, payload: bytes, now: float) -> None:
        if ACK_MARK in payload[:12]:
            counts["acks"] += 1
        else:
            counts["errors"] += 1
        client[0].send(op)  # keep the window full

    client += await open_clients(port, f"/v1/namespaces/{NS}/ws?token={bearer}", 1, on_frame)
    client[0].send(op * window)
    await asyncio.sleep(warmup)
    acks0, cpu0, t0 = counts["acks"], cpu_seconds(pid), time.monotonic()
    await asyncio.sleep(duration)
    acks, cpu, elapsed = counts["acks"] - acks0, cpu_seconds(pid) - cpu0, time.monotonic() - t0
    assert client[0].transport is not None
    client[0].transport.close()
    return {
        "ops_per_s": acks / elapsed,
        "errors": counts["errors"],
        "cpu_s": cpu,
        "us_per_op": cpu / max(acks, 1) * 1e6,
    }


def measure_syncd(code: Path, args: argparse.Namespace, program: str) -> dict[str, Any]:
    bearer = token()
    auth = [f"authorization: Bearer {bearer}"]
    wrk_args = {
        "duration": args.duration,
        "warmup": args.warmup,
        "connections": args.connections,
    }
    out: dict[str, Any] = {}
    with running([], code) as (port, pid):
        out["op"] = wrk_cpu(program, port, pid, body=OP_BODY, headers=auth, **wrk_args)
        batch = wrk_cpu(program, port, pid, body=BATCH_BODY, headers=auth, **wrk_args)
        batch["us_per_op"] = batch["us_per_request"] / BATCH_OPS
        out["batch"] = batch
        out["ws"] = uvloop.run(ws_ops(port, bearer, args.window, args.warmup, args.duration, pid))
    return out


def measure_peers(args: argparse.Namespace, program: str) -> dict[str, Any]:
    py = sys.executable
    auth = [f"authorization: Bearer {token()}"]
    peers = {
        "raw uvloop": ([py, "-m", "perf.peers.raw_uvloop"], []),
        "starlette in memory": ([py, "-m", "perf.peers.starlette_app"], []),
        "starlette same work": ([py, "-m", "perf.peers.starlette_syncd"], auth),
    }
    out: dict[str, Any] = {}
    for name, (cmd, headers) in peers.items():
        with running(cmd, ROOT) as (port, pid):
            out[name] = wrk_cpu(
                program,
                port,
                pid,
                body=OP_BODY,
                headers=headers,
                duration=args.duration,
                warmup=args.warmup,
                connections=args.connections,
            )
    return out


def summary(runs: list[dict[str, Any]], codes: list[str]) -> str:
    def median(values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")

    def of(code: str, key: str, field: str) -> float:
        return median([r[key][field] for r in runs if r["code"] == code and key in r])

    def peer(name: str, field: str) -> float:
        return median([r[name][field] for r in runs if r["code"] == "peers" and name in r])

    rows = []
    for code in codes:
        rows += [
            (
                f"syncd ({code}): HTTP op",
                f"{of(code, 'op', 'us_per_request'):.1f}",
                f"{of(code, 'op', 'rps'):,.0f} req/s",
            ),
            (
                f"syncd ({code}): 100-op batch, per op",
                f"{of(code, 'batch', 'us_per_op'):.2f}",
                f"{of(code, 'batch', 'rps') * BATCH_OPS:,.0f} ops/s",
            ),
            (
                f"syncd ({code}): WebSocket op",
                f"{of(code, 'ws', 'us_per_op'):.1f}",
                f"{of(code, 'ws', 'ops_per_s'):,.0f} ops/s",
            ),
        ]
    for name in ("raw uvloop", "starlette in memory", "starlette same work"):
        if any(r["code"] == "peers" and name in r for r in runs):
            rows.append(
                (name, f"{peer(name, 'us_per_request'):.1f}", f"{peer(name, 'rps'):,.0f} req/s")
            )
    lines = [table(rows, ("workload", "CPU us per request/op", "rate"))]
    if "before" in codes and "after" in codes:
        ratios = [
            (
                what,
                f"{of('after', key, field) / of('before', key, field):.3f}x",
            )
            for what, key, field in (
                ("HTTP op", "op", "us_per_request"),
                ("100-op batch, per op", "batch", "us_per_op"),
                ("WebSocket op", "ws", "us_per_op"),
            )
        ]
        lines += ["", table(ratios, ("after / before, CPU per op", "ratio"))]
    if not codes:
        return "\n".join(lines)
    last = codes[-1]
    syncd_op = of(last, "op", "us_per_request")
    peer_rows = [
        (name, f"{peer(name, 'us_per_request') / syncd_op:.2f}x")
        for name in ("raw uvloop", "starlette in memory", "starlette same work")
        if any(r["code"] == "peers" and name in r for r in runs)
    ]
    if peer_rows:
        lines += ["", table(peer_rows, (f"peer CPU per request / syncd's ({last})", "ratio"))]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measurement")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of load first (0: none)")
    parser.add_argument("--connections", type=int, default=50, help="wrk's connections")
    parser.add_argument("--window", type=int, default=1000, help="WebSocket ops in flight")
    parser.add_argument("--only", default="syncd,peers", help="of syncd, peers")
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout to run (default: this)")
    parser.add_argument("--compare", type=Path, help="another checkout, run alternately")
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args(argv)
    program = find_wrk()
    if program is None:
        parser.error("wrk is not installed (apt-get install -y wrk)")
    only = set(args.only.split(","))
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {int(LOAD_CORE)})  # the WebSocket client's core
    codes = checkouts(args.code, args.compare)
    runs: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        order = list(codes.items())
        if round_ % 2:
            order.reverse()  # neither always runs first, on a machine warmed by the other
        if "syncd" in only:
            for name, code in order:
                r = measure_syncd(code, args, program)
                runs.append({"code": name, "round": round_, **r})
                print(
                    f"  round {round_} {name:<6} HTTP op {r['op']['us_per_request']:.1f} us"
                    f" ({r['op']['rps']:,.0f}/s, p99 {r['op']['p99_ms']} ms)"
                    f"  batch {r['batch']['us_per_op']:.2f} us/op"
                    f"  WebSocket {r['ws']['us_per_op']:.1f} us/op ({r['ws']['ops_per_s']:,.0f}/s)",
                    flush=True,
                )
        if "peers" in only:
            r = measure_peers(args, program)
            runs.append({"code": "peers", "round": round_, **r})
            print(
                "  round "
                + str(round_)
                + " peers "
                + "  ".join(
                    f"{k} {v['us_per_request']:.1f} us ({v['rps']:,.0f}/s)" for k, v in r.items()
                ),
                flush=True,
            )
    print()
    print(summary(runs, list(codes) if "syncd" in only else []))
    if args.json:
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        Path(args.json).write_text(json.dumps({"settings": settings, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
