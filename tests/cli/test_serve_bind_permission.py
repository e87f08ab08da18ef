"""A SERVICE_BIND port the server's user may not listen on (below 1024 without
CAP_NET_BIND_SERVICE: EACCES) was found only by the server's own bind, after
the store was opened: exit 1 and "cannot start: [Errno 13] error while
attempting to bind on address ('127.0.0.1', 80): permission denied", naming
neither the variable nor what to do. Now it is one line naming SERVICE_BIND,
exit 2, before anything is opened, like an address in use or not on this
machine (tests/cli/test_serve_bind_host.py).

The tests run as root, who may bind any port: the syncd process is started
without CAP_NET_BIND_SERVICE (dropped from its capability bounding set before
the exec, so the new program never gets it), as a service user would be."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SIGNING_KEY_HEX

PR_CAPBSET_DROP = 24
CAP_NET_BIND_SERVICE = 10
PRIVILEGED_PORT = 80


def unprivileged_port_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())
    except (OSError, ValueError):
        return 1024


def drop_net_bind_service() -> None:
    """In the child before its exec: no CAP_NET_BIND_SERVICE from then on."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_CAPBSET_DROP, CAP_NET_BIND_SERVICE, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def start_without_the_capability(data_dir: Path, bind: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "syncd"],
        env={
            **os.environ,
            "SERVICE_BIND": bind,
            "SERVICE_DATA_DIR": str(data_dir),
            "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
        },
        capture_output=True,
        timeout=20,
        preexec_fn=drop_net_bind_service if os.geteuid() == 0 else None,
    )


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or unprivileged_port_start() <= PRIVILEGED_PORT,
    reason="needs Linux with privileged ports",
)
def test_a_privileged_port_is_one_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    try:
        proc = start_without_the_capability(data_dir, f"127.0.0.1:{PRIVILEGED_PORT}")
    except subprocess.SubprocessError as exc:  # no CAP_SETPCAP to drop it with
        pytest.skip(f"cannot drop CAP_NET_BIND_SERVICE: {exc}")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.decode().strip().splitlines()
    assert lines == [
        f"syncd: SERVICE_BIND: cannot listen on 127.0.0.1:{PRIVILEGED_PORT}: Permission denied"
        " (a port below 1024 needs root or CAP_NET_BIND_SERVICE)"
    ]
    assert not data_dir.exists()  # refused before the store was opened
