"""CPU budgets for benchmark processes: cgroup v1 CPU quotas (as root).

A benchmark that asks how a design scales must give every process a CPU
budget of its own; otherwise it measures how the processes share the
machine's cores. :class:`CpuBudgets` makes one group per process under
``/sys/fs/cgroup/cpu`` (named ``syncd-bench-<run>-<name>``), each with
``cpu.cfs_period_us`` = 100000 and ``cpu.cfs_quota_us`` = its share of that
period, and the same group under ``/sys/fs/cgroup/cpuacct`` where that
controller is mounted apart, which counts the group's CPU time (processes
that have exited included: a PostgreSQL backend that came and went still
counts).

A process joins its group before it runs anything: :meth:`CpuBudgets.wrap`
turns a command into ``sh -c 'echo $$ > .../cgroup.procs; exec "$@"'``, so the
process and every child it forks stay in the group. A process that is
already running (a PostgreSQL started elsewhere) is moved with
:meth:`CpuBudgets.move`; the children it forks afterwards follow it.

The budget is a ceiling, not a reservation: on a machine that others share,
a group may get less than its quota. The groups' ``cpu.shares`` are raised
(:data:`SHARES`) so they win against the machine's other work when it
competes, and :meth:`CpuBudgets.usage` reports each group's CPU seconds and
throttled periods, so a reader sees whether a process used its budget (it
was the limit) or not.

Every group is removed when the context ends, on errors too: the processes
still in a group are moved back to the root group first (a cgroup v1
directory can only be removed empty). :func:`leftovers` lists groups an
earlier run that was killed outright left behind, and :func:`remove_leftovers`
removes them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

CPU_ROOT: Final = Path("/sys/fs/cgroup/cpu")
CPUACCT_ROOT: Final = Path("/sys/fs/cgroup/cpuacct")
PREFIX: Final = "syncd-bench-"
PERIOD_US: Final = 100_000
"""The quota's period: 100 ms, the kernel's default (a budget of 0.25 is 25 ms of it)."""
SHARES: Final = 8192
"""The groups' weight against the rest of the machine (1024 is one root task's):
when the machine is busy, the benchmark's processes still get their budgets."""


class CgroupsUnavailable(RuntimeError):
    """No writable cgroup v1 CPU controller here (not root, or cgroup v2 only)."""


def available() -> str | None:
    """None when budgets can be set here, else why not (one line)."""
    if os.geteuid() != 0:
        return "cgroup CPU quotas need root"
    if not (CPU_ROOT / "cpu.cfs_quota_us").exists():
        return f"no cgroup v1 CPU controller at {CPU_ROOT}"
    return None


@dataclass(frozen=True)
class Usage:
    """One group's CPU over an interval."""

    cpu_s: float
    """CPU seconds used (all its processes, exited ones included)."""
    periods: int
    """Quota periods in which the group ran."""
    throttled: int
    """Periods in which it used its whole quota and had to wait."""

    def __sub__(self, other: Usage) -> Usage:
        return Usage(
            self.cpu_s - other.cpu_s, self.periods - other.periods, self.throttled - other.throttled
        )


class CpuBudgets:
    """The CPU budget groups of one benchmark run (a context manager)."""

    def __init__(self, period_us: int = PERIOD_US) -> None:
        reason = available()
        if reason is not None:
            raise CgroupsUnavailable(reason)
        if not 1000 <= period_us <= 1_000_000:
            raise ValueError("the kernel takes a period of 1 ms to 1 s")
        self.period_us = period_us
        self.run = PREFIX + secrets.token_hex(3)
        self._groups: dict[str, float] = {}
        self._accounting = (CPUACCT_ROOT / "cpuacct.usage").exists() and (
            CPUACCT_ROOT.resolve() != CPU_ROOT.resolve()
        )

    def __enter__(self) -> CpuBudgets:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _dirs(self, name: str) -> list[Path]:
        group = f"{self.run}-{name}"
        dirs = [CPU_ROOT / group]
        if self._accounting:
            dirs.append(CPUACCT_ROOT / group)
        return dirs

    def add(self, name: str, cores: float) -> None:
        """A group ``name`` allowed ``cores`` of a core (0.25: a quarter)."""
        if not 0 < cores <= (os.cpu_count() or 1):
            raise ValueError(f"{name}: a budget of {cores} cores")
        if name in self._groups:
            raise ValueError(f"{name}: a group of that name exists")
        self._groups[name] = cores
        cpu, *acct = self._dirs(name)
        cpu.mkdir()
        (cpu / "cpu.cfs_period_us").write_text(str(self.period_us))
        (cpu / "cpu.cfs_quota_us").write_text(str(round(cores * self.period_us)))
        (cpu / "cpu.shares").write_text(str(SHARES))
        for path in acct:
            path.mkdir()

    def budget(self, name: str) -> float:
        return self._groups[name]

    def wrap(self, name: str, cmd: Sequence[str]) -> list[str]:
        """``cmd`` as a command that joins group ``name`` before it runs."""
        joins = "; ".join(
            f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in self._dirs(name)
        )
        return ["sh", "-c", f'{joins} && exec "$@"', "sh", *cmd]

    def move(self, name: str, pid: int) -> None:
        """Move a running process (not the children it has already forked) into ``name``."""
        for path in self._dirs(name):
            (path / "cgroup.procs").write_text(str(pid))

    def pids(self, name: str) -> list[int]:
        text = (self._dirs(name)[0] / "cgroup.procs").read_text()
        return [int(line) for line in text.split()]

    def usage(self, name: str) -> Usage:
        cpu, *acct = self._dirs(name)
        stat = dict(
            (key, int(value))
            for key, value in (line.split() for line in (cpu / "cpu.stat").read_text().splitlines())
        )
        cpu_s = float("nan")
        if acct:
            cpu_s = int((acct[0] / "cpuacct.usage").read_text()) / 1e9
        return Usage(cpu_s, stat.get("nr_periods", 0), stat.get("nr_throttled", 0))

    def close(self) -> None:
        """Remove every group (moving what is still in it to the root group first)."""
        for name in list(self._groups):
            for path in self._dirs(name):
                _remove(path)
            del self._groups[name]


def _remove(path: Path) -> None:
    if not path.exists():
        return
    root = path.parent
    with contextlib.suppress(OSError):
        for line in (path / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):  # gone meanwhile
                (root / "cgroup.procs").write_text(line)
    with contextlib.suppress(OSError):
        path.rmdir()


def leftovers() -> list[Path]:
    """Groups named like ours that a killed run left behind."""
    found: list[Path] = []
    for root in (CPU_ROOT, CPUACCT_ROOT):
        if root.is_dir():
            found.extend(sorted(root.glob(PREFIX + "*")))
    return found


def remove_leftovers() -> list[Path]:
    """Remove :func:`leftovers`; the ones removed."""
    gone = []
    for path in leftovers():
        _remove(path)
        if not path.exists():
            gone.append(path)
    return gone


def children(pid: int) -> Iterator[int]:
    """The processes whose parent is ``pid`` (a PostgreSQL postmaster's backends)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                yield int(entry.name)
