"""What the suite ran on: the machine, its load, its speed, and the code measured.

Figures only mean something next to the machine that produced them, and the
benchmark machines are shared: the report records the CPU, cores, memory,
kernel, Python and wrk (:func:`describe`), the load average and the CPU
speed index (perf.suite.cpu_index, run pinned to the server core) at the
start and at the end of the run, and the commit, naming any uncommitted
files, since other work in progress is part of what was measured
(:func:`git_commit`).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
from typing import Any

from perf.lib.servers import LOAD_CORE, ROOT, SERVER_CORE, pinned
from perf.lib.wrk import find_wrk, wrk_version

DIRTY_SHOWN = 8
"""Uncommitted files named in the report; the rest are counted as "..."."""
CPU_INDEX_TIMEOUT_S = 120
"""The index takes a few seconds; this only stops a hung child."""


def cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def memory_gib() -> float | None:
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    return None


def load_average() -> str:
    with contextlib.suppress(OSError), open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])
    return "unknown"


def cpu_index() -> float | None:
    """perf.suite.cpu_index on the server core: how fast the machine is right now."""
    cmd = pinned([sys.executable, "-m", "perf.suite.cpu_index", "--json"], SERVER_CORE)
    try:
        out = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=CPU_INDEX_TIMEOUT_S
        )
        return float(json.loads(out.stdout)["us"])
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
        return None


def git_commit() -> str:
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout
    except OSError:
        return "unknown"
    dirty = dirty.rstrip("\n")  # each line is "XY path": the leading blank counts
    if not sha:
        return "unknown"
    if not dirty:
        return sha
    # Other work in progress is part of what was measured: name it.
    files = [line[3:] for line in dirty.splitlines()]
    shown = ", ".join(files[:DIRTY_SHOWN]) + (", ..." if len(files) > DIRTY_SHOWN else "")
    return f"{sha} plus uncommitted changes to {shown}"


def describe() -> dict[str, Any]:
    """The machine, as the report's "Machine" section shows it."""
    mem = memory_gib()
    wrk_path = find_wrk()
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(mem, 1) if mem else None,
        "kernel": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "wrk": (wrk_version(wrk_path) if wrk_path else "") or None,
        "server_core": SERVER_CORE,
        "load_core": LOAD_CORE,
    }
