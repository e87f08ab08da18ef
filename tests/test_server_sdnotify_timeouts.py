"""systemd's notify protocol beyond READY=1, with a real unix datagram
NOTIFY_SOCKET and the real server: ``EXTEND_TIMEOUT_USEC`` while a start-up
recovery makes progress (and not once it stops making any) and for a stop's
planned waits, so that TimeoutStartSec/TimeoutStopSec do not kill a long
recovery or drain; ``RELOADING=1`` + ``MONOTONIC_USEC`` then ``READY=1``
around a SIGHUP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SIGNING_KEY_HEX, free_port, wait_ready

SHORT_INTERVAL_S = 0.2
"""EXTEND_INTERVAL_S in the test's server: the behaviour, not the wait."""

HELD_S = 2.0
"""How long the test holds the recovery at its first file in log/."""


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify.sock"))
    sock.settimeout(20)
    yield sock
    sock.close()


def receive_until(sock: socket.socket, needle: str, messages: list[str]) -> list[str]:
    """Datagrams into ``messages`` until one contains ``needle``."""
    deadline = time.monotonic() + 20
    while not any(needle in m for m in messages):
        assert time.monotonic() < deadline, messages
        messages.append(sock.recv(4096).decode())
    return messages


def extensions(messages: list[str]) -> list[int]:
    return [
        int(line.partition("=")[2])
        for m in messages
        for line in m.splitlines()
        if line.startswith("EXTEND_TIMEOUT_USEC=")
    ]


def test_the_start_and_the_stop_extend_the_timeouts(
    spawn_server: Any, notify_socket: socket.socket
) -> None:
    path = notify_socket.getsockname()
    server = spawn_server({"NOTIFY_SOCKET": path, "SERVICE_SHUTDOWN_DRAIN_S": "100"})
    messages = receive_until(notify_socket, "READY=1", [])
    before_ready = messages[: next(i for i, m in enumerate(messages) if "READY=1" in m)]
    assert extensions(before_ready), messages
    assert any("STATUS=recovering storage" in m for m in before_ready), messages
    server.proc.send_signal(signal.SIGTERM)
    stopping = receive_until(notify_socket, "STOPPING=1", [])[-1]
    # The drain (100 s) + SERVICE_SHUTDOWN_TIMEOUT_S (10) + SERVICE_WEBHOOK_DRAIN_S (5) and more.
    assert extensions([stopping]) and extensions([stopping])[0] > 115_000_000, stopping
    server.proc.send_signal(signal.SIGTERM)  # no more drain
    assert server.proc.wait(timeout=20) == 0
    notify_socket.settimeout(0)
    rest: list[str] = []
    try:
        while True:
            rest.append(notify_socket.recv(4096).decode())
    except BlockingIOError:
        pass
    assert any("STATUS=closing storage" in m for m in rest), rest


def _serve_held(tmp_path: Path, path: str, work: str) -> subprocess.Popen[bytes]:
    """``syncd serve`` whose recovery is held for HELD_S at its first file in
    log/, busy (``work`` "spin": on the CPU) or stuck ("sleep")."""
    port = free_port()
    log_dir = str(tmp_path / "data" / "log")
    hold = (
        "    end = time.monotonic() + HELD\n    while time.monotonic() < end: pass\n"
        if work == "spin"
        else "    time.sleep(HELD)\n"
    )
    code = (
        "import sys, time\n"
        f"HELD = {HELD_S!r}\n"
        "held = []\n"
        "def hook(event, args):\n"
        "  if event == 'open' and isinstance(args[0], str)"
        f" and args[0].startswith({log_dir!r}) and not held:\n"
        "    held.append(1)\n" + hold + "sys.addaudithook(hook)\n"
        "import syncd.sdnotify\n"
        f"syncd.sdnotify.EXTEND_INTERVAL_S = {SHORT_INTERVAL_S!r}\n"
        "from syncd.cli import main\n"
        "sys.exit(main(['serve']))\n"
    )
    env = {
        **os.environ,
        "NOTIFY_SOCKET": path,
        "SERVICE_BIND": f"127.0.0.1:{port}",
        "SERVICE_DATA_DIR": str(tmp_path / "data"),
        "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
        "SERVICE_FSYNC": "never",
    }
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE)
    proc.port = port  # type: ignore[attr-defined]
    return proc


@pytest.mark.parametrize("work", ["spin", "sleep"])
def test_a_recovery_is_extended_while_it_makes_progress(
    tmp_path: Path, notify_socket: socket.socket, work: str
) -> None:
    proc = _serve_held(tmp_path, notify_socket.getsockname(), work)
    try:
        messages = receive_until(notify_socket, "READY=1", [])
        wait_ready(proc.port, proc)  # type: ignore[attr-defined]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    before_ready = messages[: next(i for i, m in enumerate(messages) if "READY=1" in m)]
    count = len(extensions(before_ready))
    ticks = HELD_S / SHORT_INTERVAL_S
    if work == "spin":
        assert count >= ticks / 2, messages
    else:
        # The first, when the start began; none while nothing happens.
        assert 1 <= count <= 2, messages
        assert b"recovering storage: no progress" in err, err


def test_a_reload_is_announced(spawn_server: Any, notify_socket: socket.socket) -> None:
    server = spawn_server({"NOTIFY_SOCKET": notify_socket.getsockname()})
    receive_until(notify_socket, "READY=1", [])
    sent = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    server.proc.send_signal(signal.SIGHUP)
    messages = receive_until(notify_socket, "RELOADING=1", [])
    reloading = messages[-1].splitlines()
    assert reloading[0] == "RELOADING=1", reloading
    (stamp,) = [int(v.partition("=")[2]) for v in reloading if v.startswith("MONOTONIC_USEC=")]
    assert sent <= stamp < sent + 10_000_000
    after = receive_until(notify_socket, "READY=1", [])
    assert after[-1].startswith("READY=1"), after
    assert server.terminate() == 0
