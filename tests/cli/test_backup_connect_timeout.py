"""``syncd backup --url`` to an address that never answers the connect (a
firewall that drops packets, a host that is down): one line within
``CONNECT_TIMEOUT_S``, not a wait of the read timeout (600 s; about 2 minutes
in practice, the kernel's SYN retries). The blackhole is a real listening
socket whose accept queue is full: Linux drops the SYNs of further connects."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ADMIN

SHORT_CONNECT_TIMEOUT_S = 1.0
"""CONNECT_TIMEOUT_S in the test's backup: the behaviour, not the wait."""


@pytest.fixture
def blackhole() -> Iterator[int]:
    """A port on 127.0.0.1 whose new connects hang (their SYNs dropped)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filling: list[socket.socket] = []
    try:
        for _ in range(8):  # enough to fill the accept queue (backlog 0: one or two)
            sock = socket.socket()
            sock.settimeout(0.3)
            try:
                sock.connect(("127.0.0.1", port))
            except OSError:
                sock.close()
                break
            filling.append(sock)
        else:
            pytest.skip("the accept queue never filled: no blackhole on this kernel")
        yield port
    finally:
        for sock in filling:
            sock.close()
        listener.close()


def test_a_connect_that_is_never_answered_ends_in_one_line(blackhole: int, tmp_path: Path) -> None:
    dest = tmp_path / "copy"
    code = (
        "import sys\n"
        "import syncd.cli.backup as backup\n"
        f"backup.CONNECT_TIMEOUT_S = {SHORT_CONNECT_TIMEOUT_S!r}\n"
        "from syncd.cli import main\n"
        f"sys.exit(main(['backup', {str(dest)!r}, '--url', 'http://127.0.0.1:{blackhole}']))\n"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN},
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(
        f"syncd backup: http://127.0.0.1:{blackhole}/v1/admin/backup: no connection within 1 s"
    ), done.stderr
    assert took < 15, took
    assert not dest.exists()


def test_the_default_connect_timeout_is_short() -> None:
    from syncd.cli.backup import CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S

    assert CONNECT_TIMEOUT_S <= 10 < REQUEST_TIMEOUT_S
