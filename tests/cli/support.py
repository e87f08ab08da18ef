"""Running ``syncd`` in a real subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ADMIN
from tests.http.support import issue, op


def run_without(
    modules: list[str], args: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``syncd args`` in a real subprocess where ``modules`` cannot be imported
    (as on an install without their extra)."""
    code = (
        "import sys\n"
        f"for name in {modules!r}: sys.modules[name] = None\n"
        "from syncd.cli import main\n"
        f"sys.exit(main({args!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


def backup_killed_at(dest: Path, url: str, event: str, path: str) -> None:
    """``syncd backup DEST`` in a real process that SIGKILLs itself at the
    audit ``event`` whose first argument starts with ``path`` (for ``open``,
    a path under it): where a crash or a power cut could stop it."""
    code = (
        "import os, signal, sys\n"
        "def hook(event, args):\n"
        f"    if event == {event!r} and isinstance(args[0], str)"
        f" and args[0].startswith({path!r}):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "sys.addaudithook(hook)\n"
        "from syncd.cli import main\n"
        f"sys.exit(main(['backup', {str(dest)!r}, '--url', {url!r}]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN},
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == -9, done.stderr


TERMINAL_SIGNALS = (
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "signal.signal(signal.SIGHUP, signal.SIG_DFL)\n"
)
"""The first lines of a child that sends itself SIGINT or SIGHUP: the signals
as a terminal's foreground process takes them. A run started with SIGINT
ignored (a background job of a shell without job control) or SIGHUP ignored
(nohup) passes that on to its children, whose Python then leaves it ignored:
the signal would do nothing, and a test of what it does would fail because of
how the suite was started."""


def backup_signalled_on_open(
    dest: Path, url: str, stop: signal.Signals, *, under: str, containing: str = ""
) -> subprocess.CompletedProcess[str]:
    """``syncd backup DEST`` in a real process that sends itself ``stop`` as it
    opens the first file whose path starts with ``under`` and contains
    ``containing``: a Ctrl-C (SIGINT) or a crash (SIGKILL) at that step."""
    code = (
        "import os, signal, sys\n" + TERMINAL_SIGNALS + f"dest = {str(dest)!r}\n"
        "def hook(event, args):\n"
        "    if event == 'open' and isinstance(args[0], str)"
        f" and args[0].startswith({under!r}) and {containing!r} in args[0]:\n"
        f"        os.kill(os.getpid(), signal.{stop.name})\n"
        "sys.addaudithook(hook)\n"
        "from syncd.cli import main\n"
        f"sys.exit(main(['backup', dest, '--url', {url!r}]))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN},
        capture_output=True,
        text=True,
        timeout=60,
    )


def verify(path: Path) -> subprocess.CompletedProcess[str]:
    """``syncd verify PATH`` in a real subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "syncd", "verify", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def server_to_back_up(spawn_server: Any) -> str:
    """The URL of a real server with a log and history to back up."""
    server = spawn_server({})
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        r = await op(client, h, "lw:title", {"op": "set", "value": "kept"})
        assert r.status_code == 200
    return str(server.url)
