"""``syncd backup`` without ``--url``, run with the environment of a server
that listens on ``SERVICE_BIND=[::]:PORT``. That socket is dual-stack, so the
default URL is ``http://127.0.0.1:PORT``, which also reaches it where IPv6
is switched off and ``::1`` is no address (the address ``syncd health``
asks); ``[::1]:PORT`` stays ``[::1]``."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from syncd.cli.backup import _default_url
from tests.conftest import ADMIN, free_port


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_the_wildcard_addresses_map_to_the_loopback_that_reaches_them() -> None:
    assert _default_url({"SERVICE_BIND": "0.0.0.0:3000"}) == "http://127.0.0.1:3000"
    wildcard = "127.0.0.1" if socket.has_dualstack_ipv6() else "[::1]"
    assert _default_url({"SERVICE_BIND": "[::]:3000"}) == f"http://{wildcard}:3000"
    assert _default_url({"SERVICE_BIND": "[::1]:3000"}) == "http://[::1]:3000"
    assert _default_url({}) == "http://127.0.0.1:3000"


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback here")
def test_a_backup_of_a_server_on_every_ipv6_address(spawn_server: Any, tmp_path: Path) -> None:
    port = free_port()
    server = spawn_server({"SERVICE_BIND": f"[::]:{port}"}, port=port, ready=False)
    deadline = time.monotonic() + 20
    while True:
        assert server.proc.poll() is None, server.log()
        with contextlib.suppress(OSError), socket.create_connection(("::1", port), 0.2):
            break
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.05)
    dest = tmp_path / "copy"
    done = subprocess.run(
        [sys.executable, "-m", "syncd", "backup", str(dest)],
        # The environment the server runs with, as an operator sources it.
        env={**os.environ, "SERVICE_BIND": f"[::]:{port}", "SERVICE_ADMIN_TOKEN": ADMIN},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (dest / "MANIFEST.json").is_file()
