"""Shared by the benchmarks: start servers pinned to a core, run load, print tables."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ADMIN = "bench-admin-secret-0123456789"
SIGNING_KEY = "22" * 32
SERVER_CORE = "0"
LOAD_CORE = "1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pinned(cmd: Sequence[str], core: str) -> list[str]:
    """Pin to one core when taskset exists and the machine has more than one."""
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        return ["taskset", "-c", core, *cmd]
    return list(cmd)


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {port}")


@contextlib.contextmanager
def process(
    cmd: Sequence[str], port: int, env: dict[str, str] | None = None, core: str = SERVER_CORE
) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        pinned(cmd, core),
        env={**os.environ, **(env or {})},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_port(port, proc)
        time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def syncd(
    env: dict[str, str] | None = None, data_dir: str | None = None
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    tmp = None
    if data_dir is None:
        tmp = tempfile.mkdtemp(prefix="syncd-bench-")
        data_dir = tmp
    full = {
        "SERVICE_BIND": f"127.0.0.1:{port}",
        "SERVICE_DATA_DIR": data_dir,
        "SERVICE_ADMIN_TOKEN": ADMIN,
        "SERVICE_SIGNING_KEY": SIGNING_KEY,
        "SERVICE_LOG_LEVEL": "warning",
        **(env or {}),
    }
    try:
        with process([sys.executable, "-m", "syncd"], port, full) as proc:
            yield port, proc
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def bench_token(port: int, ns: str = "bench", client_id: int = 7) -> str:
    body = json.dumps(
        {"client_id": client_id, "rules": {"r": [{"p": "*"}], "w": [{"p": "*"}], "rl": 1_000_000}}
    ).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/namespaces/{ns}/tokens",
        data=body,
        headers={"authorization": f"Bearer {ADMIN}", "content-type": "application/json"},
    )
    with urllib.request.urlopen(req) as resp:
        return str(json.load(resp)["token"])


def loadgen(
    port: int,
    *,
    path: str,
    method: str = "GET",
    body: str = "",
    headers: Sequence[str] = (),
    connections: int = 32,
    duration: float = 5.0,
    rate: float = 0.0,
    warmup: float = 1.0,
) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "perf.loadgen",
        "--port",
        str(port),
        "--path",
        path,
        "--method",
        method,
        "--connections",
        str(connections),
        "--duration",
        str(duration),
        "--warmup",
        str(warmup),
    ]
    if body:
        cmd += ["--body", body]
    for h in headers:
        cmd += ["--header", h]
    if rate:
        cmd += ["--rate", str(rate)]
    out = subprocess.run(
        pinned(cmd, LOAD_CORE),
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=duration + warmup + 60,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def headroom_note(result: dict[str, Any]) -> str:
    cpu = float(result.get("generator_cpu", 0))
    return "generator saturated!" if cpu > 0.9 else f"generator at {cpu:.0%} of a core"


def table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(row)))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
