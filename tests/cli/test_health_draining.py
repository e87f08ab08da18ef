"""``syncd health`` (the container's HEALTHCHECK) during a graceful drain:
SIGTERM with SERVICE_SHUTDOWN_DRAIN_S set makes /health/ready answer 503
``draining`` while everything is still served. The process is healthy,
finishing its work: health said 1 (unhealthy), and a drain longer than the
check's interval times its retries marked the container unhealthy (an
orchestrator that replaces unhealthy containers killed it mid-drain)."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from typing import Any

from syncd.cli.health import _draining
from tests.cli.test_health import health


def readiness(url: str) -> tuple[int, str]:
    """``/health/ready``'s status and its body's ``status``."""
    try:
        with urllib.request.urlopen(f"{url}/health/ready", timeout=10) as answer:
            return answer.status, json.loads(answer.read())["status"]
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())["status"]


def test_a_draining_server_is_healthy(spawn_server: Any) -> None:
    server = spawn_server({"SERVICE_SHUTDOWN_DRAIN_S": "60"})
    env = {"SERVICE_BIND": f"0.0.0.0:{server.port}"}
    assert health(env).returncode == 0
    server.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 20
    while readiness(server.url) != (503, "draining"):
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.05)
    done = health(env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == ""
    assert server.proc.poll() is None  # still draining when it was asked
    assert server.terminate() == 0  # the second signal ends the drain


def test_only_a_drain_is_let_through() -> None:
    """Any other 503 (``unavailable``: storage that takes no writes) or
    answer is unhealthy, as before."""
    assert _draining(503, b'{"status":"draining","wal_last_seq":0}')
    assert not _draining(503, b'{"status":"unavailable","wal_last_seq":0}')
    assert not _draining(500, b'{"status":"draining"}')
    assert not _draining(503, b"draining")
    assert not _draining(503, b'["draining"]')
