"""Idle connections: the server's memory per open connection, native WebSocket,
Yjs and SSE, up to 100,000 of them.

For each kind and count, a fresh ``python -m syncd`` (pinned to core 0,
``SERVICE_FSYNC=never``, ``SERVICE_MAX_CONNECTIONS`` above the count) is
given connections by client processes on core 1
(:mod:`perf.lib.idle_clients`, ``--per-process`` connections each), each
connection live as a real client's is: a native WebSocket subscribed to a
counter, a y-websocket connection synced to a document, an SSE stream past
its snapshot. They are spread over ``--crdts`` CRDTs (100), whose own memory
is then in the baseline, not in the figure:

1. ``WARMUP_CONNECTIONS`` are opened and kept (the first use of each code
   path, the CRDTs, the hub's tables);
2. the server's RSS is read (after ``SETTLE_S``): the baseline;
3. the count is opened, by several processes at once;
4. the RSS is read again, and ``/metrics`` must count every connection open.

Figure: the RSS growth over the count, in KiB per connection. Target (issue
#35): <= 4 KiB each at 100,000, every kind.

Every process needs a file descriptor per connection: RLIMIT_NOFILE is
raised for this process and its children. Raising the hard limit needs
CAP_SYS_RESOURCE; where it cannot be raised (a container's or a VM's hard
limit), the server holds at most that many connections, and a count above it
is measured at the highest that fits, said in the output. Ports: see
:mod:`perf.lib.idle_clients` (source addresses 127.0.0.2 on).

``--compare DIR`` runs another checkout's server (``git worktree add
../before <commit>``) alternately with ``--code`` (default this one),
kind by kind and count by count, round by round, and prints each figure's
ratio, after / before.

Usage: python -m perf.studies.idle_connections [--kinds ws,yjs,sse]
       [--counts 10000,100000] [--crdts 100] [--per-process 15000] [--rounds 1]
       [--compare ../before] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from perf.lib.checkouts import checkouts
from perf.lib.idle_clients import KINDS
from perf.lib.proc import cpu_seconds
from perf.lib.servers import (
    LOAD_CORE,
    ROOT,
    SERVER_CORE,
    bench_token,
    free_port,
    pinned,
    server_env,
    wait_port,
)
from perf.lib.table import table

NS: Final = "bench"
WARMUP_CONNECTIONS: Final = 200
"""Opened (and kept) before the baseline: two per CRDT at the default 100, so
every CRDT and code path is in memory before the count is measured."""
SETTLE_S: Final = 2.0
"""Pause before each RSS reading, so what the opening queued is done."""
FD_MARGIN: Final = 200
"""File descriptors beyond the connections: the server has ~20 of its own
(the store's files, the listener, the loop's), a client process a few."""
OPEN_RATE_FLOOR: Final = 200
"""Connections per second below which the opening counts as stuck (timeout)."""
STOP_TIMEOUT_S: Final = 60.0
TARGET_KIB: Final = 4.0


def raise_fd_limit(needed: int) -> int:
    """Raise RLIMIT_NOFILE (soft and hard) towards ``needed`` for this process
    and the children it starts; returns the soft limit reached. Raising the
    hard limit needs CAP_SYS_RESOURCE: without it the hard limit is the
    ceiling (a container's, say)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, max(needed, hard)))
        return needed
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard


def fitting(counts: list[int], limit: int) -> tuple[list[int], str]:
    """The counts one server can hold within ``limit`` file descriptors (a
    count above it is measured at the highest that fits), and what was
    lowered, in words ("" when nothing was)."""
    fits = limit - WARMUP_CONNECTIONS - FD_MARGIN
    if max(counts) <= fits:
        return counts, ""
    note = (
        f"RLIMIT_NOFILE stops at {limit} here (the hard limit, which this process "
        f"may not raise): one server holds at most {fits:,} connections besides the "
        f"warm-up; counts above that are measured at {fits:,}"
    )
    return sorted({min(c, fits) for c in counts}), note


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


@contextlib.contextmanager
def server(code: Path, max_connections: int) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """``python -m syncd`` from the checkout ``code`` (its own modules first)."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="syncd-idle-") as data_dir:
        env = {
            **os.environ,
            **server_env(
                port,
                data_dir,
                SERVICE_FSYNC="never",
                SERVICE_MAX_CONNECTIONS=str(max_connections),
                SERVICE_RATE_LIMIT="100000000",
                PYTHONPATH=str(code),
            ),
        }
        proc = subprocess.Popen(
            pinned([sys.executable, "-m", "syncd"], SERVER_CORE),
            env=env,
            cwd=code,
            stdout=subprocess.DEVNULL,
        )
        try:
            wait_port(port, proc)
            yield port, proc
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class Clients:
    """Client processes holding connections open until :meth:`close`."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, config: dict[str, Any]) -> None:
        cmd = pinned([sys.executable, "-m", "perf.lib.idle_clients", json.dumps(config)], LOAD_CORE)
        self.procs.append(
            subprocess.Popen(
                cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
        )

    def wait_opened(self, procs: list[subprocess.Popen[str]], timeout: float) -> int:
        """Every one of ``procs`` says its connections are live: their total."""
        deadline = time.monotonic() + timeout
        waiting = {p.stdout: p for p in procs if p.stdout is not None}
        opened = 0
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{len(waiting)} client processes still opening")
            ready, _, _ = select.select(list(waiting), [], [], left)
            for out in ready:
                proc = waiting.pop(out)
                line = out.readline()
                if not line:
                    raise RuntimeError(f"a client process exited with {proc.wait()}")
                opened += int(json.loads(line)["opened"])
        return opened

    def close(self) -> int:
        """Close them all; the connections found lost before that."""
        lost = 0
        for proc in self.procs:
            if proc.stdin is not None:
                with contextlib.suppress(BrokenPipeError):
                    proc.stdin.close()
        for proc in self.procs:
            if proc.stdout is not None:
                line = proc.stdout.readline()
                if line:
                    lost += int(json.loads(line).get("lost", 0))
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        return lost


def open_gauge(port: int) -> dict[str, float]:
    """The connection gauges /metrics shows."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    wanted = (
        "service_connections_open",
        "service_ws_connections_active",
        "service_sse_connections_active",
    )
    out: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in wanted:
            out[name] = float(value)
    return out


def measure(
    code: Path, kind: str, count: int, crdts: int, per_process: int, settle: float
) -> dict[str, Any]:
    total = WARMUP_CONNECTIONS + count
    with server(code, total + FD_MARGIN) as (port, proc):
        token = bench_token(port, NS)
        base_config = {"kind": kind, "port": port, "ns": NS, "token": token, "crdts": crdts}
        clients = Clients()
        try:
            clients.start({**base_config, "count": WARMUP_CONNECTIONS, "first": 0})
            clients.wait_opened(clients.procs, 120)
            time.sleep(settle)
            base = rss_bytes(proc.pid)
            cpu_before = cpu_seconds(proc.pid)
            processes = max(1, math.ceil(count / per_process))
            started = time.monotonic()
            first = WARMUP_CONNECTIONS
            for k in range(processes):
                share = count // processes + (1 if k < count % processes else 0)
                clients.start({**base_config, "count": share, "first": first})
                first += share
            opened = clients.wait_opened(clients.procs[1:], 120 + count / OPEN_RATE_FLOOR)
            took = time.monotonic() - started
            time.sleep(settle)
            after = rss_bytes(proc.pid)
            cpu = cpu_seconds(proc.pid) - cpu_before
            gauges = open_gauge(port)
        finally:
            lost = clients.close()
    counted = gauges.get("service_connections_open", 0) - 1  # the /metrics request's own
    if opened != count or counted != total or lost:
        raise RuntimeError(
            f"{kind}: {opened} of {count} opened, the server counted {counted:.0f} of "
            f"{total}, {lost} lost before the end"
        )
    return {
        "kind": kind,
        "connections": count,
        "processes": processes,
        "rss_base": base,
        "rss_after": after,
        "per_connection": (after - base) / count,
        "open_s": took,
        "open_cpu_s": cpu,
        "gauges": gauges,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--kinds", default=",".join(KINDS), help="of ws, yjs, sse")
    parser.add_argument("--counts", default="10000,100000")
    parser.add_argument("--crdts", type=int, default=100, help="CRDTs the connections spread over")
    parser.add_argument("--per-process", type=int, default=15_000, help="connections per client")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--settle", type=float, default=SETTLE_S, help="seconds before each RSS reading"
    )
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout to run (default: this)")
    parser.add_argument("--compare", type=Path, help="another checkout, run alternately")
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    if not set(kinds) <= set(KINDS):
        parser.error(f"--kinds: of {', '.join(KINDS)}")
    counts = [int(c) for c in args.counts.split(",")]
    # This process's children inherit it: the server and the clients.
    limit = raise_fd_limit(WARMUP_CONNECTIONS + max(counts) + FD_MARGIN)
    counts, note = fitting(counts, limit)
    if note:
        print(note, flush=True)
    per_process = min(args.per_process, limit - FD_MARGIN)
    codes = checkouts(args.code, args.compare)
    runs: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        for count in counts:
            for kind in kinds:
                # Alternate which goes first, so neither always runs on a
                # machine warmed (or loaded) by the other.
                order = list(codes.items())
                if round_ % 2:
                    order.reverse()
                for name, code in order:
                    r = measure(code, kind, count, args.crdts, per_process, args.settle)
                    r.update(code=name, round=round_)
                    runs.append(r)
                    print(
                        f"  {name:<6} {kind:<3} {count:>7,}: "
                        f"{r['per_connection'] / 1024:.2f} KiB per connection "
                        f"(RSS {r['rss_base'] / 2**20:.0f} -> {r['rss_after'] / 2**20:.0f} MiB, "
                        f"opened in {r['open_s']:.0f} s by {r['processes']} processes)",
                        flush=True,
                    )
    print()
    print(summary(runs, list(codes), kinds, counts))
    if args.json:
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        Path(args.json).write_text(json.dumps({"settings": settings, "runs": runs}, indent=2))
    return 0


def summary(
    runs: list[dict[str, Any]], codes: list[str], kinds: list[str], counts: list[int]
) -> str:
    """KiB per connection (the median of the rounds) per kind and count, per
    checkout, and after / before."""
    rows = []
    for count in counts:
        for kind in kinds:
            kib = {}
            for name in codes:
                figures = [
                    r["per_connection"] / 1024
                    for r in runs
                    if r["kind"] == kind and r["connections"] == count and r["code"] == name
                ]
                kib[name] = statistics.median(figures)
            row: list[Any] = [kind, f"{count:,}", *(f"{kib[n]:.2f}" for n in codes)]
            if len(codes) == 2:
                before = kib[codes[0]]
                # A few connections may not grow the RSS by a page at all.
                row.append(f"{kib[codes[1]] / before:.2f}x" if before > 0 else "n/a")
            row.append("yes" if kib[codes[-1]] <= TARGET_KIB else "no")
            rows.append(row)
    headers = ["kind", "connections", *(f"{n} KiB" for n in codes)]
    if len(codes) == 2:
        headers.append(f"{codes[1]}/{codes[0]}")
    headers.append(f"<= {TARGET_KIB:g} KiB")
    return table(rows, headers)


if __name__ == "__main__":
    raise SystemExit(main())
