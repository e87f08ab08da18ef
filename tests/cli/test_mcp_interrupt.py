"""``syncd mcp`` run in a terminal: Ctrl-C (SIGINT) ends it at once, without a
traceback, while its stdin is still open (it waited for Enter or Ctrl-D)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from tests.client.conftest import NS, make_token

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(find_spec("mcp") is None, reason="syncd[mcp] is not installed")


def test_ctrl_c_ends_a_serving_mcp_at_once(spawn_server: Any) -> None:
    server = spawn_server({})
    args = ["--base-url", server.url, "--token", make_token(21), "--namespace", NS]
    proc = subprocess.Popen(
        [sys.executable, "-m", "syncd", "mcp", *args, "--crdt", "tags:orset"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PYTHONPATH": str(REPO)},
        cwd=str(REPO),
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        initialize = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        }
        proc.stdin.write(json.dumps(initialize).encode() + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 0  # serving, stdin open
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=5) == -signal.SIGINT
        assert proc.stderr is not None
        assert b"Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
