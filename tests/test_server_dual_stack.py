"""SERVICE_BIND=[::]:PORT serves IPv4 clients too (one dual-stack socket), as
nginx, Go and most servers do: the loop's create_server set IPV6_V6ONLY, so
a client of 127.0.0.1 was refused. An explicit IPv6 address stays as it is."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SIGNING_KEY_HEX, free_port


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


pytestmark = pytest.mark.skipif(
    not (_has_ipv6_loopback() and socket.has_dualstack_ipv6()),
    reason="no IPv6 loopback or no dual-stack sockets",
)


def live_over(family: socket.AddressFamily, address: str, port: int) -> bytes:
    """The status line of ``GET /health/live`` asked over ``address``."""
    with socket.socket(family) as sock:
        sock.settimeout(10)
        sock.connect((address, port))
        sock.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return sock.recv(4096).split(b"\r\n", 1)[0]


def test_the_ipv6_wildcard_serves_ipv4_and_ipv6(spawn_server: Any) -> None:
    port = free_port()
    # spawn_server's readiness check connects over 127.0.0.1: it timed out before.
    server = spawn_server({"SERVICE_BIND": f"[::]:{port}"}, port=port)
    assert live_over(socket.AF_INET, "127.0.0.1", port) == b"HTTP/1.1 200 OK"
    assert live_over(socket.AF_INET6, "::1", port) == b"HTTP/1.1 200 OK"
    assert f"listening on [::]:{port}" in server.log()
    assert server.terminate() == 0


def test_an_explicit_ipv6_address_stays_ipv6_only(spawn_server: Any) -> None:
    port = free_port()
    server = spawn_server({"SERVICE_BIND": f"[::1]:{port}"}, port=port, ready=False)
    status = b""
    for _ in range(400):  # up to 20 s to start
        try:
            status = live_over(socket.AF_INET6, "::1", port)
            break
        except OSError:
            assert server.proc.poll() is None, server.log()
            time.sleep(0.05)
    assert status == b"HTTP/1.1 200 OK"
    with pytest.raises(ConnectionRefusedError):
        live_over(socket.AF_INET, "127.0.0.1", port)
    assert server.terminate() == 0


def test_the_ipv6_wildcard_on_a_port_taken_on_ipv4_is_one_line(tmp_path: Path) -> None:
    """Another process on 0.0.0.0:PORT: an IPv6-only [::]:PORT bound beside
    it, and IPv4 clients reached the other process. The dual-stack bind is
    refused, before anything is opened, with SERVICE_BIND's line and exit 2."""
    with socket.socket(socket.AF_INET) as other:
        other.bind(("0.0.0.0", 0))
        other.listen()
        port = other.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "syncd", "serve"],
            env={
                **os.environ,
                "SERVICE_BIND": f"[::]:{port}",
                "SERVICE_DATA_DIR": str(tmp_path / "data"),
                "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
            },
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"syncd: SERVICE_BIND: cannot listen on [::]:{port}: Address already in use"
    ]
    assert not (tmp_path / "data").exists()
