"""perf.studies.cluster_scaling at a tiny size: one node and a two-node cluster
with their isolated control, every process in a CPU budget of its own, figures
for every run and the model, and no cgroup left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perf.lib import cgroups

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(cgroups.available() is not None, reason=f"{cgroups.available()}")


def test_the_study_runs_every_size_in_budgets_and_leaves_no_group(tmp_path: Path) -> None:
    out = tmp_path / "scaling.json"
    args = ["--nodes", "1,2", "--workloads", "spread,affinity"]
    args += ["--duration", "1", "--warmup", "0.5"]
    args += ["--node-cpu", "0.5", "--pg-cpu", "0.5", "--load-cpu", "0.5", "--crdts", "8"]
    result = subprocess.run(
        [sys.executable, "-m", "perf.studies.cluster_scaling", *args, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(out.read_text())
    every = figures["runs"]
    runs = {(r["nodes"], r["kind"]): r for r in every if r["workload"] == "spread"}
    assert set(runs) == {(1, "cluster"), (2, "cluster"), (2, "isolated")}
    routed = {(r["nodes"], r["kind"]): r for r in every if r["workload"] == "affinity"}
    assert set(routed) == set(runs)
    # Routed by CRDT, the two nodes never write one CRDT: nobody waits for a row.
    assert routed[(2, "cluster")]["pg_row_waits"] == 0
    assert routed[(2, "cluster")]["not_200"] == 0
    for run in runs.values():
        assert run["ops_s"] > 0 and run["not_200"] == 0
        assert run["node_us_per_op"] > 0 and run["pg_us_per_op"] > 0
        assert all(0 < use < 1.2 for use in run["budget_use"].values()), run["budget_use"]
        # The lock sampler saw the nodes' statements (waits are means of counts).
        assert run["pg_active"] > 0, run
        assert run["pg_row_waits"] >= 0 and run["pg_notify_waits"] >= 0
        assert run["pg_idle_in_transaction"] >= 0
    # Isolated nodes have databases of their own: nobody waits for their rows.
    assert runs[(2, "isolated")]["pg_row_waits"] == 0
    assert runs[(2, "cluster")]["per_node"][1]["notices"] > 0  # the nodes did share
    assert runs[(2, "isolated")]["per_node"][1]["notices"] == 0  # and these did not
    two = figures["models"]["this"]["spread"]["sizes"]["2"]
    assert two["vs_one"] > 0 and two["efficiency"] > 0 and two["projected_ops_s"] > 0
    # Its own groups only: another run (a parallel test) may hold groups meanwhile.
    assert not any(p.name.startswith(figures["cgroups"]) for p in cgroups.leftovers())
