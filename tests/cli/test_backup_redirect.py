"""``syncd backup --url`` answered with a redirect: not followed, so the root
admin secret goes nowhere but the URL given (urllib sent it on to the
redirect's target, another host included); one line naming the target."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Redirects every POST to ``/elsewhere`` and records what reaches it."""

    seen: list[tuple[str, str, str | None]] = []

    def _record(self) -> None:
        self.seen.append((self.command, self.path, self.headers.get("authorization")))

    def do_POST(self) -> None:
        self._record()
        self.send_response(301)
        self.send_header("location", f"http://127.0.0.1:{self.server.server_address[1]}/elsewhere")
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._record()
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def redirecting() -> Iterator[http.server.HTTPServer]:
    _Recorder.seen = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_redirect_is_not_followed_and_the_secret_stays(
    redirecting: http.server.HTTPServer, tmp_path: Path
) -> None:
    port = redirecting.server_address[1]
    dest = tmp_path / "copy"
    done = subprocess.run(
        [sys.executable, "-m", "syncd", "backup", str(dest), "--url", f"http://127.0.0.1:{port}"],
        env={**os.environ, "SERVICE_ADMIN_TOKEN": "the-root-secret"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr == (
        f"syncd backup: http://127.0.0.1:{port}/v1/admin/backup refused the backup: 301 "
        f"redirect to 'http://127.0.0.1:{port}/elsewhere', not followed (give --url the "
        "server itself)\n"
    )
    assert _Recorder.seen == [("POST", "/v1/admin/backup", "Bearer the-root-secret")]
    assert not dest.exists()
