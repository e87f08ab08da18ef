"""``syncd verify`` interrupted by Ctrl-C (a long check of a large data
directory): one line and exit 130, not a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.cli.support import TERMINAL_SIGNALS
from tests.http.support import issue, op


async def test_ctrl_c_during_verify_is_one_line(spawn_server: Any, tmp_path: Path) -> None:
    server = spawn_server({})
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        await op(client, h, "lw:title", {"op": "set", "value": "kept"})
    data = tmp_path / "data"
    assert any((data / "history").iterdir())
    # SIGINT as verify opens the first history file, in a real process.
    code = (
        "import os, signal, sys\n" + TERMINAL_SIGNALS + "def hook(event, args):\n"
        "    if event == 'open' and isinstance(args[0], str) and '/history/' in args[0]:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "sys.addaudithook(hook)\n"
        "from syncd.cli import main\n"
        f"sys.exit(main(['verify', {str(data)!r}]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 128 + signal.SIGINT, done.stderr
    assert done.stderr == "syncd verify: interrupted\n"
