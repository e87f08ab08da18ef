"""Running ``syncd`` in a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys


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
