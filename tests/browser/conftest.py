"""Browser fixtures: a real syncd subprocess with the demo on, and headless
Chromium driven through tests/browser/driver.mjs (playwright-core, Debian's
chromium). ``bash scripts/ensure-browser.sh`` installs both; without them the
tests skip, except under CI, where a missing browser is a failure."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ADMIN, Subprocess

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("driver.mjs")
CHROMIUM = Path(os.environ.get("SYNCD_CHROMIUM", "/usr/bin/chromium"))
PLAYWRIGHT = ROOT / "clients" / "js" / "node_modules" / "playwright-core"

COMMAND_TIMEOUT_S = 30.0
"""One driver command (a page load, a wait) finishes well within this."""

CONVERGE_TIMEOUT_S = 15.0
"""How long pages may take to agree after the last edit (normally well under a second)."""


def _missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (run scripts/ensure-browser.sh)"
    if not PLAYWRIGHT.exists():
        return "clients/js/node_modules is missing (run scripts/ensure-browser.sh)"
    return None


class DriverError(AssertionError):
    pass


class Browser:
    """The driver process: ``call("open", page="a", url=...)`` and friends."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            ["node", str(DRIVER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            cwd=ROOT,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def call(self, cmd: str, timeout: float = COMMAND_TIMEOUT_S, **fields: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd, **fields}) + "\n")
        self.proc.stdin.flush()
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise DriverError(f"driver: no answer to {cmd} within {timeout} s") from None
        if line is None:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise DriverError(f"driver exited: {err[-2000:]}")
        answer = json.loads(line)
        if not answer["ok"]:
            raise DriverError(f"{cmd} failed: {answer['error']}\npage logs: {answer.get('logs')}")
        return answer["value"]

    def state(self, page: str) -> dict[str, Any]:
        result: dict[str, Any] = self.call("eval", page=page, js="window.syncdDemo.state()")
        return result

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write('{"cmd": "exit"}\n')  # type: ignore[union-attr]
                self.proc.stdin.flush()  # type: ignore[union-attr]
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture
def browser() -> Iterator[Browser]:
    reason = _missing()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"browser tests cannot run: {reason}")
        pytest.skip(reason)
    b = Browser()
    yield b
    b.close()


@pytest.fixture
def demo_server(spawn_server: Callable[..., Subprocess]) -> Callable[..., Subprocess]:
    """Start (or restart, with ``port=``) syncd with the demo on."""

    def start(port: int | None = None) -> Subprocess:
        return spawn_server({"SERVICE_DEMO": "true", "SERVICE_LOG_LEVEL": "warning"}, port=port)

    return start


def read_state(base_url: str, crdt_id: str) -> dict[str, Any] | None:
    """The server's view of a demo CRDT, read with the admin secret."""
    r = httpx.get(
        f"{base_url}/v1/namespaces/demo/crdts/{crdt_id}",
        headers={"authorization": f"Bearer {ADMIN}"},
    )
    if r.status_code == 404:
        return None
    r.raise_for_status()
    result: dict[str, Any] = r.json()
    return result


def wait_until(check: Callable[[], Any], timeout: float = CONVERGE_TIMEOUT_S) -> Any:
    """Poll ``check`` until it returns something truthy; its last value on timeout is an error."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"not reached within {timeout} s; last: {last!r}")
