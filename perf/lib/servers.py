"""Servers for the benchmarks: syncd and the peers as subprocesses pinned to a core.

Every benchmark measures a server in another process: ``python -m syncd``
(:func:`syncd`, with a throw-away data directory, a known admin token and
signing key) or a peer (:func:`process`). The server runs on
``SERVER_CORE`` and the load on ``LOAD_CORE`` (:func:`pinned`, when the
machine has more than one core), so the two never compete for one core and a
generator's CPU figure is its own. A server counts as started once its port
accepts a connection; :func:`ready_status` asks ``/health/ready`` for the
benchmarks that time a start.
"""

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

ROOT = Path(__file__).resolve().parents[2]
"""The repository: the benchmarks' working directory."""
ADMIN = "bench-admin-secret-0123456789"
SIGNING_KEY = "22" * 32
SERVER_CORE = "0"
LOAD_CORE = "1"


def free_port() -> int:
    """A port no socket is bound to on any address, not only on 127.0.0.1: some
    peers listen on every address whatever they are told (@hocuspocus/server
    3.4 passes ``address`` where Node reads ``host``), and a port free on
    127.0.0.1 only was then in use (EADDRINUSE) after perf.studies.idle_connections
    had bound many on 127.0.0.2 and up."""
    with socket.socket() as sock:
        sock.bind(("", 0))
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


STDERR_TAIL_BYTES = 4000
"""How much of a server's stderr an error shows when it exits before listening."""


@contextlib.contextmanager
def process(
    cmd: Sequence[str],
    port: int,
    env: dict[str, str] | None = None,
    core: str = SERVER_CORE,
    cwd: Path = ROOT,
) -> Iterator[subprocess.Popen[bytes]]:
    """``cmd`` pinned to ``core``, from ``cwd``, until the body is done; ready
    once ``port`` accepts a connection. Its stderr goes to a temporary file,
    not a pipe nobody reads (a server that logs more than a pipe holds would
    block in the middle of a run); an exit before listening raises with the
    end of it."""
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            pinned(cmd, core),
            env={**os.environ, **(env or {})},
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        try:
            try:
                wait_port(port, proc)
            except RuntimeError as exc:
                stderr.seek(max(0, stderr.seek(0, os.SEEK_END) - STDERR_TAIL_BYTES))
                tail = stderr.read().decode(errors="replace").strip()
                raise RuntimeError(f"{exc}: {tail}" if tail else str(exc)) from None
            time.sleep(0.2)
            yield proc
        finally:
            stop(proc)


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM ``proc`` and wait for it; SIGKILL it after ``timeout_s``."""
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def server_env(port: int, data_dir: str, **settings: str) -> dict[str, str]:
    """The settings every benchmark's ``python -m syncd`` runs with (the bench
    admin secret and signing key, quiet logs), plus ``settings``."""
    return {
        "SERVICE_BIND": f"127.0.0.1:{port}",
        "SERVICE_DATA_DIR": data_dir,
        "SERVICE_ADMIN_TOKEN": ADMIN,
        "SERVICE_SIGNING_KEY": SIGNING_KEY,
        "SERVICE_LOG_LEVEL": "warning",
        **settings,
    }


@contextlib.contextmanager
def syncd(
    env: dict[str, str] | None = None, data_dir: str | None = None
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    tmp = None
    if data_dir is None:
        tmp = tempfile.mkdtemp(prefix="syncd-bench-")
        data_dir = tmp
    full = server_env(port, data_dir, **(env or {}))
    try:
        with process([sys.executable, "-m", "syncd"], port, full) as proc:
            yield port, proc
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def bench_token(port: int, ns: str = "bench", client_id: int = 7, rl: int = 1_000_000) -> str:
    """A token that may read and write everything in ``ns`` at ``rl`` requests/s."""
    body = json.dumps(
        {"client_id": client_id, "rules": {"r": [{"p": "*"}], "w": [{"p": "*"}], "rl": rl}}
    ).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/namespaces/{ns}/tokens",
        data=body,
        headers={"authorization": f"Bearer {ADMIN}", "content-type": "application/json"},
    )
    with urllib.request.urlopen(req) as resp:
        return str(json.load(resp)["token"])


def ready_status(port: int) -> int | None:
    """The status of GET /health/ready, or None while nothing listens."""
    try:
        with socket.create_connection(("127.0.0.1", port), 1.0) as sock:
            sock.sendall(b"GET /health/ready HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
            head = sock.recv(64)
    except OSError:
        return None
    return int(head[9:12]) if head.startswith(b"HTTP/1.1 ") else None
