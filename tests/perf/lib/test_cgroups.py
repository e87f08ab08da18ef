"""perf.lib.cgroups against the machine's cgroup v1 CPU controller (as root):
a process that joins a group is held to its quota and counted, and every
group goes at the end, on an error too, with a process still in it."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from perf.lib import cgroups
from perf.lib.cgroups import CPU_ROOT, CpuBudgets

pytestmark = pytest.mark.skipif(cgroups.available() is not None, reason=f"{cgroups.available()}")

SPIN_LIMIT_S = 30
"""The busy loop ends by itself after this: a test run killed while it spins
(a runner's timeout) left it orphaned, spinning for good beside the rest."""
SPIN = [
    sys.executable,
    "-c",
    f"import time\nend = time.monotonic() + {SPIN_LIMIT_S}\nwhile time.monotonic() < end: pass",
]


def test_a_process_gets_its_budget_and_the_groups_go_at_the_end() -> None:
    with CpuBudgets() as budgets:
        budgets.add("spin", 0.2)
        group = CPU_ROOT / f"{budgets.run}-spin"
        assert (group / "cpu.cfs_period_us").read_text().strip() == "100000"
        assert (group / "cpu.cfs_quota_us").read_text().strip() == "20000"
        proc = subprocess.Popen(budgets.wrap("spin", SPIN))
        try:
            time.sleep(0.3)  # started and joined
            assert proc.pid in budgets.pids("spin")
            before = budgets.usage("spin")
            time.sleep(1.0)
            used = budgets.usage("spin") - before
        finally:
            proc.kill()
            proc.wait()
        # A busy loop allowed a fifth of a core: about 0.2 s of CPU a second, throttled.
        assert 0.1 < used.cpu_s < 0.3
        assert used.throttled >= 5
    assert not group.exists()
    assert not any(p.name.startswith(budgets.run) for p in cgroups.leftovers())


def test_every_group_goes_on_an_error_with_a_process_still_in_it() -> None:
    proc = None
    with pytest.raises(RuntimeError), CpuBudgets() as budgets:
        budgets.add("sleeper", 0.1)
        proc = subprocess.Popen(budgets.wrap("sleeper", ["sleep", "30"]))
        time.sleep(0.2)
        raise RuntimeError("the benchmark failed")
    try:
        assert not any(p.name.startswith(budgets.run) for p in cgroups.leftovers())
        assert proc is not None and proc.poll() is None  # moved out, not killed
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()


def test_bad_budgets_are_refused() -> None:
    with CpuBudgets() as budgets:
        with pytest.raises(ValueError, match="budget"):
            budgets.add("none", 0)
        budgets.add("once", 0.1)
        with pytest.raises(ValueError, match="exists"):
            budgets.add("once", 0.1)
