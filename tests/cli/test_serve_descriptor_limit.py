"""A process's soft descriptor limit is often far below what the service
needs (systemd's default is 1024 soft, 524288 hard; SERVICE_MAX_CONNECTIONS'
default is 10000): the kernel's accept failed with EMFILE once that many
were open, and a client past it got no answer at all, not even the 503 the
connection limit answers, while the hard limit allowed plenty. syncd serve
now raises its soft limit to what SERVICE_MAX_CONNECTIONS needs (at most
the hard limit), and warns at start when the hard limit is too low."""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncd.cli.serve import DESCRIPTOR_RESERVE
from tests.conftest import SIGNING_KEY_HEX, Subprocess, free_port, wait_ready

SOFT = 128
MAX_CONNECTIONS = 1000
IDLE = 200
"""Idle connections held open: past the soft limit SOFT, well within MAX_CONNECTIONS."""


def soft_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no descriptor limit listed")


@contextlib.contextmanager
def idle_connections(port: int, count: int) -> Iterator[None]:
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        yield
    finally:
        for sock in held:
            sock.close()


def health(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return sock.recv(64)


@contextlib.contextmanager
def server_with_limits(tmp_path: Path, soft: int, hard: int) -> Iterator[Subprocess]:
    """A real syncd started under the descriptor limits ``soft`` and ``hard``."""
    port = free_port()
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "syncd"],
            env={
                **os.environ,
                "SERVICE_BIND": f"127.0.0.1:{port}",
                "SERVICE_DATA_DIR": str(tmp_path / "data"),
                "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
                "SERVICE_FSYNC": "never",
                "SERVICE_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
            },
            stdout=log_file,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)),
        )
    server = Subprocess(proc, port, log_path)
    try:
        wait_ready(port, proc)
        yield server
    finally:
        if proc.poll() is None:
            server.kill()


@pytest.fixture
def hard_limit() -> int:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    needed = MAX_CONNECTIONS + DESCRIPTOR_RESERVE
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the hard descriptor limit ({hard}) is below {needed}")
    return hard


def test_connections_past_the_soft_limit_are_served(tmp_path: Path, hard_limit: int) -> None:
    with server_with_limits(tmp_path, SOFT, hard_limit) as server:
        check_served(server)


def check_served(server: Subprocess) -> None:
    assert soft_limit(server.proc.pid) >= MAX_CONNECTIONS + DESCRIPTOR_RESERVE
    with idle_connections(server.port, IDLE):
        assert health(server.port).startswith(b"HTTP/1.1 200")
    assert "file descriptors" not in server.log()
    assert server.terminate() == 0


def test_a_hard_limit_too_low_is_a_warning(tmp_path: Path) -> None:
    with server_with_limits(tmp_path, SOFT, SOFT * 2) as server:
        check_warned(server)


def check_warned(server: Subprocess) -> None:
    deadline = time.monotonic() + 10
    while "file descriptors" not in server.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    needed = MAX_CONNECTIONS + DESCRIPTOR_RESERVE
    assert (
        f"SERVICE_MAX_CONNECTIONS={MAX_CONNECTIONS} needs about {needed} file descriptors,"
        f" but this process may open only {SOFT * 2}: raise LimitNOFILE"
        " (systemd) or ulimit -n, or lower SERVICE_MAX_CONNECTIONS"
    ) in server.log()
    assert soft_limit(server.proc.pid) == SOFT * 2  # as far as it goes
    assert server.terminate() == 0
