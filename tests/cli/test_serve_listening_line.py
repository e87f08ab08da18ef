"""The start's "listening on" line wrote an IPv6 host without its brackets
("listening on ::1:40991"), which reads as the address ::1:40991 with no port
and cannot be pasted into a URL or SERVICE_BIND. It is written as
SERVICE_BIND takes it: "[::1]:40991"; an IPv4 host as before."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable

import pytest

from tests.conftest import Subprocess

LINE = re.compile(r"listening on (\S+) \(")


def listening_on(server: Subprocess, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = LINE.search(server.log())
        if found:
            return found.group(1)
        assert server.proc.poll() is None, server.log()
        time.sleep(0.05)
    raise TimeoutError(server.log())


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize(
    ("bind", "shown"),
    [
        pytest.param(
            "[::1]:0",
            r"\[::1\]:\d+",
            marks=pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback"),
        ),
        ("127.0.0.1:0", r"127\.0\.0\.1:\d+"),
    ],
)
def test_the_listening_line_writes_the_address_as_service_bind_takes_it(
    spawn_server: Callable[..., Subprocess], bind: str, shown: str
) -> None:
    server = spawn_server({"SERVICE_BIND": bind}, ready=False)
    address = listening_on(server)
    assert re.fullmatch(shown, address), address
    assert not address.endswith(":0")  # the port it got, not the one asked for
    assert server.terminate() == 0
