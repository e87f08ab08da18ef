"""The checkouts a study runs, by name: ``this``, or ``before`` and ``after``.

A study that takes ``--compare DIR`` runs another checkout's syncd (a ``git
worktree add``) alternately with ``--code``, each on its own ``PYTHONPATH``.
Each is compiled first (``compileall``): an installed syncd's bytecode is
compiled when it is installed, while a fresh worktree has none, and with
``PYTHONDONTWRITEBYTECODE`` set (the benchmark machine sets it) every process
started from it compiles every module it imports. That is 0.2-0.6 s of CPU a
start, by how much it imports (``perf.studies.command_cpu`` measured a health
check at 0.6 s uncompiled against 0.43 s compiled; importing the server took
1.0-1.3 s against 0.5-0.65), on one side only: in any figure that counts a
process's start (a restart, a command), it is not the code's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def checkouts(code: Path, compare: Path | None) -> dict[str, Path]:
    """``{"this": code}``, or ``{"before": compare, "after": code}``, each
    compiled."""
    codes = {"this": code} if compare is None else {"before": compare, "after": code}
    for path in codes.values():
        compile_syncd(path)
    return codes


def compile_syncd(checkout: Path) -> None:
    """Write the bytecode of ``checkout``'s ``syncd`` package."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "syncd"],
        cwd=checkout,
        stdout=subprocess.DEVNULL,
        check=True,
    )
