"""Port 0 on a host that resolves to several addresses (``localhost`` as
most systems resolve it: 127.0.0.1 and ::1) had the loop pick a free port for
each listening socket: two sockets on two different ports, of which the
start's line and ``READY=1``'s status named only the first. A client that
resolved the name to the other address connected to a port nobody listened
on (or someone else's). Every socket now listens on the one port the first
got."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

import pytest

from syncd.server import listen
from tests.cli.test_serve_listening_line import has_ipv6_loopback
from tests.conftest import ADMIN, SIGNING_KEY_HEX

pytestmark = pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback")

DUAL = ["127.0.0.1", "::1"]


class _Hello(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        cast(asyncio.Transport, transport).write(b"hello")
        transport.close()


async def test_port_0_on_two_addresses_listens_on_one_port() -> None:
    loop = asyncio.get_running_loop()
    for _ in range(5):  # the loop's choice of two ports: the same one only by chance
        server = await listen(loop, _Hello, DUAL, 0)
        try:
            names = [sock.getsockname() for sock in server.sockets]
            assert sorted(str(name[0]) for name in names) == sorted(DUAL), names
            assert len({name[1] for name in names}) == 1, names
            port = names[0][1]
            for host in DUAL:
                reader, writer = await asyncio.open_connection(host, port)
                assert await asyncio.wait_for(reader.read(), 5) == b"hello"
                writer.close()
        finally:
            server.close()
            await server.wait_closed()


async def test_a_port_given_is_taken_as_it_is() -> None:
    loop = asyncio.get_running_loop()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = await listen(loop, _Hello, DUAL, port)
    try:
        assert {sock.getsockname()[1] for sock in server.sockets} == {port}
    finally:
        server.close()
        await server.wait_closed()


HOSTS = "127.0.0.1 localhost\n127.0.0.1 dual.test\n::1 dual.test\n"
"""An /etc/hosts of a private mount namespace: a name with both addresses."""


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    done = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return done.returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare -m")
def test_syncd_on_a_name_with_two_addresses_serves_both_on_the_port_it_names(
    tmp_path: Path,
) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text(HOSTS)
    script = f"mount --bind {hosts} /etc/hosts && exec {sys.executable} -m syncd"
    env = {
        **os.environ,
        "SERVICE_BIND": "dual.test:0",
        "SERVICE_DATA_DIR": str(tmp_path / "data"),
        "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
        "SERVICE_ADMIN_TOKEN": ADMIN,
        "SERVICE_FSYNC": "never",
    }
    log_path = tmp_path / "log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            ["unshare", "-m", "sh", "-c", script], env=env, stdout=log_file, stderr=log_file
        )
    try:
        port = _listening_port(proc, log_path)
        for host in DUAL:
            with socket.create_connection((host, port), timeout=5) as sock:
                sock.sendall(b"GET /health/live HTTP/1.1\r\nHost: t\r\n\r\n")
                assert sock.recv(64).startswith(b"HTTP/1.1 200"), host
    finally:
        proc.terminate()
        assert proc.wait(20) == 0, log_path.read_text()


def _listening_port(proc: subprocess.Popen[bytes], log_path: Path) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = re.search(r"listening on dual\.test:(\d+) \(", log_path.read_text())
        if found:
            return int(found.group(1))
        assert proc.poll() is None, log_path.read_text()
        time.sleep(0.05)
    raise TimeoutError(log_path.read_text())
