"""What Linux says about a server process: its memory and its CPU time.

Read from ``/proc/<pid>`` while the server runs, so a benchmark can report
the server's own cost next to its figure: resident memory in MB, and CPU
seconds (user + system), which, unlike wall time, do not grow when other
work shares the server's core.
"""

from __future__ import annotations

import os


def rss_mb(pid: int) -> float:
    """Resident memory (VmRSS) in MiB; NaN once the process has gone."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
