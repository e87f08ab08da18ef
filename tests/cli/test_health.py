"""``syncd health`` against real servers: the address from SERVICE_BIND (an
any-address asked on its family's loopback), https with SERVICE_TLS_CERT,
``/health/ready``; exit 0 when ready, 1 otherwise (never 2: Docker keeps it)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port
from tests.pki import Pki, client_context, make_pki, start_tls


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def health(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``syncd health`` with ``env`` as its only SERVICE_* settings."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
    return subprocess.run(
        [sys.executable, "-m", "syncd", "health"],
        env={**full, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


def healthy_soon(server: Any, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``syncd health`` until it says ready (the server is starting), or its last answer."""
    deadline = time.monotonic() + 20
    while True:
        assert server.proc.poll() is None, server.log()
        done = health(env)
        if done.returncode == 0 or time.monotonic() > deadline:
            return done
        time.sleep(0.2)


def _host_ipv4() -> str | None:
    """An IPv4 address of this host that is not the loopback, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("198.51.100.1", 9))  # no packet is sent: a route is chosen
        except OSError:
            return None
        address: str = sock.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_plain_on_the_any_address_and_its_own(spawn_server: Any) -> None:
    server = spawn_server({})
    for bind in (f"0.0.0.0:{server.port}", f"127.0.0.1:{server.port}"):
        done = health({"SERVICE_BIND": bind})
        assert done.returncode == 0, done.stderr
        assert done.stdout == "" and done.stderr == ""


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback")
@pytest.mark.parametrize("host", ["[::]", "[::1]"])
def test_plain_on_ipv6(spawn_server: Any, host: str) -> None:
    port = free_port()
    env = {"SERVICE_BIND": f"{host}:{port}"}
    server = spawn_server(env, port=port, ready=False)
    done = healthy_soon(server, env)
    assert done.returncode == 0, done.stderr


def test_nobody_listening_is_unhealthy_in_one_line() -> None:
    port = free_port()
    done = health({"SERVICE_BIND": f"0.0.0.0:{port}"})
    assert done.returncode == 1
    assert done.stderr.startswith(f"syncd health: http://127.0.0.1:{port}/health/ready: ")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_a_bad_setting_is_unhealthy_not_2() -> None:
    done = health({"SERVICE_BIND": "nope"})
    assert done.returncode == 1
    assert done.stderr.startswith("syncd health: SERVICE_BIND 'nope': "), done.stderr


def test_tls_on_the_loopback(spawn_server: Any, pki: Pki) -> None:
    cert, key = pki.issue("server")
    server = start_tls(spawn_server, cert, key, client_context(pki))
    tls = {"SERVICE_TLS_CERT": str(cert), "SERVICE_TLS_KEY": str(key)}
    done = health({**tls, "SERVICE_BIND": f"0.0.0.0:{server.port}"})
    assert done.returncode == 0, done.stderr
    # Without the TLS settings it asks plain HTTP, which the TLS port refuses.
    plain = health({"SERVICE_BIND": f"0.0.0.0:{server.port}"})
    assert plain.returncode == 1 and " 400 " in plain.stderr, plain.stderr


@pytest.mark.skipif(_host_ipv4() is None, reason="no IPv4 address but the loopback")
def test_tls_on_another_address_checks_the_certificate(
    spawn_server: Any, pki: Pki, tmp_path: Path
) -> None:
    cert, key = pki.issue("server")
    port = free_port()
    env = {
        "SERVICE_BIND": f"{_host_ipv4()}:{port}",
        "SERVICE_TLS_CERT": str(cert),
        "SERVICE_TLS_KEY": str(key),
    }
    server = spawn_server(env, port=port, ready=False)
    done = healthy_soon(server, env)
    assert done.returncode == 0, done.stderr
    (tmp_path / "other").mkdir()
    other, _ = make_pki(tmp_path / "other").issue("other")
    refused = health({**env, "SERVICE_TLS_CERT": str(other)})
    assert refused.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in refused.stderr, refused.stderr
