"""CPU of a command's whole process: ``syncd health``, ``syncd --version``, a
Python client made, a server started and stopped.

A container runs ``syncd health`` every 10 s (the Dockerfile's HEALTHCHECK),
so what one costs is paid all day; an agent's tool may start a process, or
make a client, per call. Each row is a fresh process run to its end; its
figure is the process's user + system CPU (``os.wait4``), the median of
``--repeat`` runs. The interpreter alone (``python -c pass``) is the floor.

``--compare DIR`` runs another checkout (``git worktree add``) alternately
with this one, each on its own ``PYTHONPATH`` and in its own directory, and
prints after/before per row: the machine's speed moves, so compare within
one run.

Each checkout's ``syncd`` is compiled first (:mod:`perf.lib.checkouts`), as
an installed one is. The server row (``SERVE_ROW``) starts ``syncd serve``
on an empty data directory, waits until it answers, and stops it with
SIGTERM.

Usage: python -m perf.studies.command_cpu [--repeat 9] [--compare DIR] [--code DIR]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perf.lib.checkouts import checkouts
from perf.lib.servers import ROOT, free_port, ready_status, server_env

NOBODY_LISTENS = "127.0.0.1:1"
"""``syncd health``'s address: refused at once, so the figure is the command's
own start and end, not a server's answer (the command exits 1)."""

CLIENTS = 10
"""Clients made by the client row, to show the cost of each after the first."""

COMMANDS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "syncd health": ["-m", "syncd", "health"],
    "syncd --version": ["-m", "syncd", "--version"],
    f"{CLIENTS} syncd.client.Client made": [
        "-c",
        "from syncd.auth.issue import issue_token\n"
        "from syncd.auth.tokens import SigningKey\n"
        "from syncd.client import Client\n"
        "import time\n"
        "key = SigningKey(bytes(32))\n"
        "token = issue_token(key, namespace='ns', client_id=1, ttl_ms=60_000,"
        " permissions={'read': ['*'], 'write': []}, now_ms=time.time_ns() // 1_000_000)\n"
        f"for _ in range({CLIENTS}):\n"
        "    Client('http://127.0.0.1:1', token, 'ns').close()\n",
    ],
}


EXPECTED_STATUS = {"syncd health": 1}
"""Each command's exit status (0 where not named): a run that ends otherwise
did not do the work measured, and stops the study."""


def cpu_s(code: Path, row: str, argv: list[str]) -> float:
    """User + system CPU of one process running ``argv`` with ``code``'s syncd."""
    env = {**os.environ, "PYTHONPATH": str(code), "SERVICE_BIND": NOBODY_LISTENS}
    proc = subprocess.Popen(
        [sys.executable, *argv],
        cwd=code,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return _reaped_cpu_s(proc, row, code)


def _reaped_cpu_s(proc: subprocess.Popen[bytes], row: str, code: Path) -> float:
    """Wait for ``proc`` (reaped here, not by Popen, for its usage) and give
    its user + system CPU; stop the study if it ended with another status
    than ``row``'s."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != EXPECTED_STATUS.get(row, 0):
        raise SystemExit(f"{row} with {code}: exit status {proc.returncode}")
    return usage.ru_utime + usage.ru_stime


SERVE_ROW = "syncd serve: start, ready, SIGTERM"
"""The server on an empty data directory, from its start until it answers
/health/ready, then stopped: what a sidecar's start costs before any CRDT."""

READY_TIMEOUT_S = 30.0
"""How long the server may take to answer before the study gives up on it."""


def serve_cpu_s(code: Path) -> float:
    """User + system CPU of a whole ``syncd serve`` run with ``code``'s syncd:
    start, ready (polled from here, at this process's cost), SIGTERM, exit."""
    port = free_port()
    with tempfile.TemporaryDirectory() as data_dir:
        env = {**os.environ, "PYTHONPATH": str(code), **server_env(port, data_dir)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "syncd", "serve"],
            cwd=code,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while ready_status(port) != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit(f"{SERVE_ROW} with {code}: not ready")
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        return _reaped_cpu_s(proc, SERVE_ROW, code)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=9, help="runs per row (median)")
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout to run (default: this)")
    parser.add_argument("--compare", type=Path, help="another checkout, run alternately")
    args = parser.parse_args(argv)
    codes = checkouts(args.code, args.compare)
    figures: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeat):
        for row, command in COMMANDS.items():
            for name, code in codes.items():  # alternately, run by run
                figures.setdefault((row, name), []).append(cpu_s(code, row, command))
        for name, code in codes.items():
            figures.setdefault((SERVE_ROW, name), []).append(serve_cpu_s(code))
    heads = [f"{name} (ms of CPU)" for name in codes]
    if len(codes) == 2:
        heads.append("after/before")
    print(f"| command | {' | '.join(heads)} |")
    print("|---" * (len(heads) + 1) + "|")
    for row in [*COMMANDS, SERVE_ROW]:
        medians = [statistics.median(figures[row, name]) * 1000 for name in codes]
        cells = [f"{m:.0f}" for m in medians]
        if len(medians) == 2:
            cells.append(f"{medians[1] / medians[0]:.2f}x")
        print(f"| {row} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
