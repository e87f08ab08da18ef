"""perf.tools.idle_memory at a tiny size: a server in its process, connections
from a client process, and the per-connection report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_report_divides_what_the_connections_hold_by_their_count() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "perf.tools.idle_memory",
            "sse",
            "--count",
            "20",
            "--tracebacks",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "== sse: " in out and "bytes per connection still allocated" in out
    assert "-- by the line that allocated them" in out and "-- by stack:" in out
    assert "syncd.http.handlers.events.SseSubscriber" in out
