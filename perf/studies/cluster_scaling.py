"""Cluster scaling with a CPU budget per process: does the design scale, not the machine?

Three syncd nodes, PostgreSQL and a load generator on one small machine
measure how they share its cores. Here every process gets a CPU budget of its
own (cgroup v1 CPU quotas, :mod:`perf.lib.cgroups`; run as root): each node
``--node-cpu`` of a core (default a quarter), PostgreSQL ``--pg-cpu`` (half)
and the load generator ``--load-cpu`` (half). Then 1, 2 and 3 nodes
(``DATABASE_URL`` on one fresh database per cluster size) take the same load,
``--connections`` keep-alive connections per node (closed loop,
:mod:`perf.lib.loadgen`), each sending authenticated, durable increments:

- spread: to one of ``--crdts`` gcounters (64) chosen at random per request;
- hot: all to one gcounter;
- affinity (``--workloads``): the spread load routed by CRDT, each node's
  clients writing only its share of the gcounters (what a load balancer
  hashing the CRDT id gives: no two nodes write one CRDT).

PostgreSQL is a throw-away server (``perf.lib.postgres``: initdb in a
temporary directory, production durability: fsync and synchronous_commit
on); the machine's own server is never touched.

*The control.* A budget gives a process its share of the cores, not of
their caches: N busy nodes and a PostgreSQL doing N times the work make the
same code cost more CPU than one node does alone (measured here: the HTTP
path's own functions, which do the same thing in both, take about a third
more CPU per op beside two other busy nodes). So each N-node cluster is also
run against N *isolated* nodes: the same N budgets and load, each node on a
database of its own (no replay, no shared rows, no notifications from the
others), at the same time. The isolated set does the work a cluster without
any sharing cost would do on this machine, so ``cluster / isolated`` is the
design's own efficiency, and ``N x`` that is what N nodes give over one node
with the machine's crowding taken out. Both ratios are printed: against a
lone node (the machine's figure) and against the control (the design's).

Measured per run: ops/s, p50/p99, the answers that were not 200, and each
process group's CPU (``cpuacct``, exited PostgreSQL backends included) over
the whole load run divided by every op answered in it: the CPU per op on the
nodes (together) and on PostgreSQL. Each group's use of its budget says what
bounded the run: nodes at their budget are the limit; PostgreSQL at its
budget is; neither means waiting (lock waits, commit latency). Per node also
the commits and the records per commit, the notifications handled, the
CRDTs read from the tables and the optimistic batches redone (``/metrics``).
And what the nodes wait for in PostgreSQL (:class:`LockSampler`): the
statements running, those waiting for another node's row or for the
server's notification queue, and the transactions waiting for their node
between two round trips (holding their row locks meanwhile), on average
over the run. A node waiting for a lock uses none of its budget, so nodes
below their budget with row waits are held back by each other's
transactions, not by their CPU.
``--workloads follow`` adds the replay cost measured directly: the spread
load on node n0 alone while the others hold every CRDT and only follow.

The capacity model (docs/operations.md#capacity-of-a-cluster) comes from the
same runs: ``c``, a node's CPU per op; ``r``, what each other node spends on
that op (the cluster's node CPU per op is ``c·(1 + (N-1)·r)``, ``c`` taken
from the control); ``p``, PostgreSQL's CPU per op; and the ops/s they
project, ``min(N·K / (c·(1 + (N-1)·r)), K_pg / p)``, next to the measured.

``--compare DIR`` runs another checkout's nodes (``git worktree add
../before <commit>``) alternately with ``--code`` (default this one),
round by round, and prints the ratios. Every cgroup made (``syncd-bench-*``)
is removed at the end, on errors too; ``--clean`` removes those a killed run
left behind. ``--profile DIR`` records every node with py-spy (folded stacks
and their summary per run).

Targets (issue #35): 3 nodes >= 2.5x one node over 64 CRDTs, >= 1.5x on the
hot CRDT.

Usage: python -m perf.studies.cluster_scaling [--nodes 1,2,3] [--duration 10] [--rounds 2]
       [--node-cpu 0.25] [--pg-cpu 0.5] [--load-cpu 0.5] [--period-ms 10] [--connections 16]
       [--no-control]
       [--workloads spread,hot,follow] [--compare ../before] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Final

import psycopg
from psycopg import sql

from perf.lib import cgroups
from perf.lib.cgroups import CpuBudgets, Usage
from perf.lib.checkouts import checkouts
from perf.lib.postgres import DURABLE, SHARED_BUFFERS
from perf.lib.servers import ROOT, bench_token, free_port, ready_status, server_env

NS: Final = "bench"
START_TIMEOUT_S: Final = 120.0
"""A node on a quarter of a core imports and connects in a few seconds; this is ample."""
TARGETS: Final = {"spread": 2.5, "hot": 1.5}
"""3 nodes against one (issue #35)."""
WORKLOADS: Final = ("spread", "hot")
FOLLOW: Final = "follow"
"""The replay measured directly: the spread load on node n0 alone, the other
nodes holding every CRDT (read once) and only following."""
AFFINITY: Final = "affinity"
"""The spread load routed by CRDT (a load balancer hashing the id): node k's
clients write only the CRDTs i with i % N == k, so no two nodes write one
CRDT; every node still holds and follows all of them."""
MODELLED: Final = (*WORKLOADS, AFFINITY)
"""The workloads measured at every size and summarised by the model."""
CLUSTER: Final = "cluster"
ISOLATED: Final = "isolated"
"""The control: the same nodes and load, each node on a database of its own."""
PROFILE_HZ: Final = "1000"
"""py-spy's samples per second: a node on a quarter of a core runs a quarter of
the time, and a run of 10 s still gets a few thousand samples of it."""
METRICS: Final = {
    "commits": "service_store_commit_seconds_count",
    "records": "service_wal_entries_total",
    "notices": "service_cluster_notifications_total",
    "table_reads": "service_cluster_table_reads_total",
    "conflicts": "service_cluster_conflicts_total",
}


def metrics(port: int) -> dict[str, float]:
    """The node's counters of :data:`METRICS` (0 for one it does not expose)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    found = dict.fromkeys(METRICS, 0.0)
    names = {name: key for key, name in METRICS.items()}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in names:
            found[names[name]] = float(value)
    return found


@contextlib.contextmanager
def databases(server_url: str, count: int) -> Iterator[list[str]]:
    """``count`` fresh databases, dropped afterwards."""
    names = ["syncd_scaling_" + secrets.token_hex(4) for _ in range(count)]
    try:
        with psycopg.connect(f"{server_url}/postgres", autocommit=True) as conn:
            for name in names:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        yield [f"{server_url}/{name}" for name in names]
    finally:
        with psycopg.connect(f"{server_url}/postgres", autocommit=True) as conn:
            for name in names:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )


@contextlib.contextmanager
def postgres(budgets: CpuBudgets, cores: float) -> Iterator[str]:
    """A throw-away PostgreSQL, it and every process it forks in group ``pg``."""
    from tests.pgserver import throwaway_postgres

    with throwaway_postgres({**DURABLE, "shared_buffers": SHARED_BUFFERS}) as server:
        pid = int((server.data / "postmaster.pid").read_text().split()[0])
        budgets.add("pg", cores)
        # The postmaster first: a backend it forks from here on is born in the group.
        budgets.move("pg", pid)
        for child in cgroups.children(pid):
            with contextlib.suppress(OSError):  # an auxiliary process that just exited
                budgets.move("pg", child)
        yield server.url


class Node:
    """One ``python -m syncd`` on PostgreSQL, from ``code``, in its budget group."""

    def __init__(self, budgets: CpuBudgets, group: str, url: str, code: Path) -> None:
        self.group = group
        self.url = url
        self.port = free_port()
        self.data_dir = tempfile.mkdtemp(prefix=f"syncd-scaling-{group}-")
        env = {
            **os.environ,
            **server_env(
                self.port,
                self.data_dir,
                DATABASE_URL=url,
                SERVICE_NODE_ID=group,
                SERVICE_RATE_LIMIT="100000000",
                PYTHONPATH=str(code),
            ),
        }
        self.proc = subprocess.Popen(
            budgets.wrap(group, [sys.executable, "-m", "syncd"]),
            env=env,
            cwd=code,
            stdout=subprocess.DEVNULL,
        )

    def wait_ready(self) -> None:
        started = time.monotonic()
        while ready_status(self.port) != 200:
            if self.proc.poll() is not None:
                raise RuntimeError(f"node {self.group} exited with {self.proc.returncode}")
            if time.monotonic() - started > START_TIMEOUT_S:
                raise TimeoutError(f"node {self.group} did not become ready")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.data_dir, ignore_errors=True)


@contextlib.contextmanager
def running(budgets: CpuBudgets, urls: list[str], code: Path) -> Iterator[list[Node]]:
    """Node ``k`` in group ``n<k>`` on ``urls[k]`` (one URL each; the same URL: a cluster)."""
    nodes: list[Node] = []
    try:
        for k, url in enumerate(urls):
            nodes.append(Node(budgets, f"n{k}", url, code))
        for node in nodes:
            node.wait_ready()
        yield nodes
    finally:
        for node in nodes:
            node.stop()


@dataclass
class Settings:
    duration: float
    warmup: float
    connections: int
    crdts: int
    workloads: tuple[str, ...] = WORKLOADS
    profile: Path | None = None
    """Where py-spy's folded stacks of every node go, one file per node and run."""


@contextlib.contextmanager
def profiled(nodes: list[Node], out: str | None, seconds: float) -> Iterator[None]:
    """py-spy on every node (non-blocking: it does not stop a node to sample)
    while the body runs; folded stacks and a summary per node, ``out-n<k>.*``."""
    if out is None:
        yield
        return
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    spies = []
    for node in nodes:
        folded = Path(f"{out}-{node.group}.folded")
        cmd = ["py-spy", "record", "--nonblocking", "--format", "raw", "--rate", PROFILE_HZ]
        cmd += ["-d", str(int(seconds)), "-p", str(node.proc.pid), "-o", str(folded)]
        spy = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PATH": path},
        )
        spies.append((folded, spy))
    try:
        yield
    finally:
        for folded, spy in spies:
            spy.wait(seconds + 60)
            if folded.exists():
                summary = subprocess.run(
                    [sys.executable, "-m", "perf.tools.profile_summary", str(folded)],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                )
                folded.with_suffix(".summary.txt").write_text(summary.stdout)


PERIOD_MS: Final = 10
"""The quotas' period. A quota is a share of each period: a quarter of a core
over 100 ms (the kernel's default) lets a node run for 25 ms and then stops
it for 75, which models no real machine, and a node stopped while its batch
holds row locks stops every other node that writes those CRDTs. Over 10 ms
the stops are at most 7.5 ms, closer to a node that is a quarter as fast.
Measured (spread over 64 CRDTs): a lone node's p99 66-67 ms at 100 ms, 9 ms
at 10 ms; three nodes' p99 40-46 ms against 19-21 ms; ops/s alike within
the runs' spread (3,667-3,967 and 6,361-7,453 at 100 ms; 3,661-3,869 and
6,361-6,496 at 10 ms)."""

LOCK_SAMPLE_S: Final = 0.05
"""How often the lock sampler looks at pg_stat_activity during a load run."""


class LockSampler:
    """Samples, every LOCK_SAMPLE_S, how many of the nodes' backends are running
    a statement, and of those how many wait for another transaction's row
    (``wait_event`` ``transactionid`` or ``tuple``) and how many for the
    server's one notification queue (``object``: a notifying transaction
    holds it from its pre-commit until its WAL flush). The means over the run
    say whether the nodes wait for each other: a node waiting for a lock uses
    none of its CPU budget, so the CPU figures cannot show it. The sampler's
    own backend is in PostgreSQL's group: about 1% of half a core."""

    def __init__(self, server_url: str, databases: list[str]) -> None:
        self._url = server_url
        self._databases = databases
        self._stop = threading.Event()
        self._samples: list[tuple[int, ...]] = []
        self._thread = threading.Thread(target=self._run, name="lock-sampler", daemon=True)

    def __enter__(self) -> LockSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        query = (
            "SELECT count(*) FILTER (WHERE state = 'active' AND wait_event IS DISTINCT FROM"
            " 'ClientRead'),"
            " count(*) FILTER (WHERE state = 'active'"
            " AND wait_event IN ('transactionid', 'tuple')),"
            " count(*) FILTER (WHERE state = 'active' AND wait_event_type = 'Lock'"
            " AND wait_event = 'object'),"
            # Mid-pipeline (no Sync yet) a backend stays 'active' while it
            # waits for its client: wait_event ClientRead.
            " count(*) FILTER (WHERE state = 'idle in transaction'"
            " OR (state = 'active' AND wait_event = 'ClientRead'))"
            " FROM pg_stat_activity WHERE datname = ANY(%s) AND pid <> pg_backend_pid()"
        )
        with psycopg.connect(f"{self._url}/postgres", autocommit=True) as conn:
            while not self._stop.wait(LOCK_SAMPLE_S):
                row = conn.execute(query, (self._databases,)).fetchone()
                if row is not None:
                    self._samples.append(tuple(int(v) for v in row))

    def means(self) -> dict[str, float]:
        """Statements running, waiting for a row, waiting for the notification
        queue, and transactions waiting for their node (between two round
        trips, holding their locks): each on average over the samples."""
        names = ("pg_active", "pg_row_waits", "pg_notify_waits", "pg_idle_in_transaction")
        if not self._samples:
            return dict.fromkeys(names, 0.0)
        return {
            name: statistics.mean(sample[k] for sample in self._samples)
            for k, name in enumerate(names)
        }


def hold_all(port: int, token: str, crdts: int, *, create: bool = False) -> None:
    """Read every CRDT of the loads on ``port`` once (the node then holds them),
    or with ``create`` write each once."""
    for i in [*range(crdts), "hot"]:
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/namespaces/{NS}/crdts/gc:{i}" + ("/ops" if create else ""),
            data=b'{"op":"increment"}' if create else None,
            headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()


def load(
    budgets: CpuBudgets,
    nodes: list[Node],
    token: str,
    workload: str,
    settings: Settings,
    profile: str | None,
) -> dict[str, Any]:
    """One load run against ``nodes``: the generator's figures and each group's CPU."""
    path = f"/v1/namespaces/{NS}/crdts/gc:{{i}}/ops"
    spread = ["--spread", str(settings.crdts)]
    if workload == AFFINITY:
        spread.append("--affinity")
    if workload == "hot":
        path, spread = f"/v1/namespaces/{NS}/crdts/gc:hot/ops", []
    serving = nodes[:1] if workload == FOLLOW else nodes
    if workload == FOLLOW:
        hold_all(nodes[0].port, token, settings.crdts, create=True)
        for node in nodes[1:]:
            hold_all(node.port, token, settings.crdts)
    cmd = [sys.executable, "-m", "perf.lib.loadgen", "--ports"]
    cmd += [",".join(str(n.port) for n in serving), "--path", path, *spread]
    cmd += ["--method", "POST", "--body", '{"op":"increment"}']
    cmd += ["--header", f"authorization: Bearer {token}"]
    cmd += ["--connections", str(settings.connections * len(serving))]
    cmd += ["--duration", str(settings.duration), "--warmup", str(settings.warmup)]
    groups = ["pg", "load", *(n.group for n in nodes)]
    before_m = [metrics(n.port) for n in nodes]
    before = {g: budgets.usage(g) for g in groups}
    started = time.monotonic()
    server_url, _, _ = nodes[0].url.rpartition("/")
    sampler = LockSampler(server_url, sorted({n.url.rpartition("/")[2] for n in nodes}))
    with profiled(nodes, profile, settings.duration + settings.warmup), sampler:
        out = subprocess.run(
            budgets.wrap("load", cmd),
            cwd=ROOT,
            capture_output=True,
            check=True,
            timeout=settings.duration + settings.warmup + 120,
        )
    wall = time.monotonic() - started
    used = {g: budgets.usage(g) - before[g] for g in groups}
    after_m = [metrics(n.port) for n in nodes]
    result: dict[str, Any] = json.loads(out.stdout)
    answered = max(1, int(result["answered"]))
    per_node = [
        {key: a[key] - b[key] for key in METRICS} for a, b in zip(after_m, before_m, strict=True)
    ]
    each = [used[n.group].cpu_s for n in nodes]
    return {
        "nodes": len(nodes),
        "workload": workload,
        "ops_s": result["rps"],
        "p50_ms": result["p50_ms"],
        "p99_ms": result["p99_ms"],
        "not_200": sum(v for k, v in result["statuses"].items() if k != "200"),
        "answered": answered,
        "wall_s": wall,
        "node_cpu_s": each,
        "node_us_per_op": sum(each) / answered * 1e6,
        "pg_us_per_op": used["pg"].cpu_s / answered * 1e6,
        "load_us_per_op": used["load"].cpu_s / answered * 1e6,
        "replay_ratio": statistics.mean(each[1:]) / each[0] if len(each) > 1 else 0.0,
        "budget_use": {g: _share(used[g], budgets.budget(g), wall) for g in groups},
        "throttled": {g: used[g].throttled / max(1, used[g].periods) for g in groups},
        **sampler.means(),
        "per_node": per_node,
    }


def _share(used: Usage, cores: float, wall: float) -> float:
    return used.cpu_s / (cores * wall)


def run_size(
    budgets: CpuBudgets,
    pg_url: str,
    count: int,
    code: Path,
    settings: Settings,
    label: str,
    kind: str,
) -> list[dict[str, Any]]:
    """Every workload on ``count`` nodes: one database (a cluster) or one each (isolated)."""
    rows = []
    with (
        databases(pg_url, 1 if kind == CLUSTER else count) as urls,
        running(budgets, urls * count if kind == CLUSTER else urls, code) as nodes,
    ):
        token = bench_token(nodes[0].port, NS)
        # Every node writes every CRDT once first: what the runs measure is
        # nodes that hold them, not their first reads from the tables.
        for node in nodes:
            hold_all(node.port, token, settings.crdts, create=True)
        for workload in settings.workloads:
            if workload == FOLLOW and (count == 1 or kind == ISOLATED):
                continue
            profile = None
            if settings.profile is not None:
                profile = str(settings.profile / f"{label}-{kind}-{count}-{workload}")
            row = load(budgets, nodes, token, workload, settings, profile)
            rows.append({"code": label, "kind": kind, **row})
            show(rows[-1])
    return rows


def show(row: dict[str, Any]) -> None:
    use = row["budget_use"]
    nodes_use = " ".join(f"{use[f'n{k}']:.0%}" for k in range(row["nodes"]))
    commits = sum(n["commits"] for n in row["per_node"]) or 1
    records = sum(n["records"] for n in row["per_node"])
    notices = sum(n["notices"] for n in row["per_node"])
    conflicts = sum(n["conflicts"] for n in row["per_node"])
    kind = "" if row["nodes"] == 1 else row["kind"]
    print(
        f"{row['code']:>6} {row['nodes']} node{'s' if row['nodes'] > 1 else ' '} {kind:<8}"
        f" {row['workload']:<6} {row['ops_s']:7,.0f} ops/s  p50 {row['p50_ms']:5.1f}"
        f" p99 {row['p99_ms']:5.1f} ms  CPU/op: nodes {row['node_us_per_op']:4.0f} us,"
        f" pg {row['pg_us_per_op']:4.0f} us, load {row['load_us_per_op']:3.0f} us"
        f"  budget used: nodes {nodes_use}, pg {use['pg']:.0%}, load {use['load']:.0%}"
        f"  {records / commits:4.1f} ops/commit, {notices:,.0f} notices, {conflicts:,.0f} conflicts"
        f"  statements running {row.get('pg_active', 0):.2f}, waiting for a row"
        f" {row.get('pg_row_waits', 0):.2f}, for the notify queue {row.get('pg_notify_waits', 0):.2f};"
        f" transactions waiting for their node {row.get('pg_idle_in_transaction', 0):.2f}"
        + (f"  NOT 200: {row['not_200']}" if row["not_200"] else "")
        + (
            f"  replay: a follower spends {row['replay_ratio']:.2f}x n0's CPU"
            if row["workload"] == FOLLOW
            else ""
        ),
        flush=True,
    )


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows) if rows else float("nan")


def model(
    rows: list[dict[str, Any]], workload: str, node_cpu: float, pg_cpu: float
) -> dict[str, Any]:
    """One code's runs of one workload: medians per size, the ratios, c, r and p,
    and the ops/s the model projects for each size."""
    mine = [r for r in rows if r["workload"] == workload]
    lone = [r for r in mine if r["nodes"] == 1]
    one = _median(lone, "ops_s")
    c_lone = _median(lone, "node_us_per_op")
    out: dict[str, Any] = {"one_ops_s": one, "c_us": c_lone, "sizes": {}}
    for size in sorted({r["nodes"] for r in mine}):
        cluster = [r for r in mine if r["nodes"] == size and r["kind"] == CLUSTER]
        isolated = [r for r in mine if r["nodes"] == size and r["kind"] == ISOLATED]
        measured = _median(cluster, "ops_s")
        node_us = _median(cluster, "node_us_per_op")
        pg_us = _median(cluster, "pg_us_per_op")
        # c beside as many busy nodes: the control's, else the lone node's.
        c = _median(isolated, "node_us_per_op") if isolated else c_lone
        control = _median(isolated, "ops_s") if isolated else one * size
        r = (node_us / c - 1) / (size - 1) if size > 1 else 0.0
        node_bound = size * node_cpu * 1e6 / node_us
        pg_bound = pg_cpu * 1e6 / pg_us
        out["sizes"][size] = {
            "ops_s": measured,
            "vs_one": measured / one,
            "control_ops_s": control,
            "efficiency": measured / control,
            "vs_one_controlled": size * measured / control,
            "node_us_per_op": node_us,
            "c_us": c,
            "pg_us_per_op": pg_us,
            "crowding": c / c_lone,
            "r": r,
            "node_bound_ops_s": node_bound,
            "pg_bound_ops_s": pg_bound,
            "projected_ops_s": min(node_bound, pg_bound),
        }
    return out


def summary(
    results: list[dict[str, Any]], codes: list[str], node_cpu: float, pg_cpu: float
) -> dict[str, Any]:
    models: dict[str, Any] = {}
    for label in codes:
        rows = [r for r in results if r["code"] == label]
        for workload in MODELLED:
            if not any(r["workload"] == workload and r["nodes"] == 1 for r in rows):
                continue
            m = models.setdefault(label, {})[workload] = model(rows, workload, node_cpu, pg_cpu)
            print(f"{label} {workload} (medians):", flush=True)
            for size, s in m["sizes"].items():
                line = (
                    f"  {size} node{'s' if size > 1 else ' '}: {s['ops_s']:7,.0f} ops/s,"
                    f" {s['vs_one']:.2f}x a lone node"
                )
                if size > 1:
                    line += (
                        f"; control {s['control_ops_s']:,.0f} ops/s, efficiency"
                        f" {s['efficiency']:.2f}: {s['vs_one_controlled']:.2f}x one node"
                        f" with the crowding taken out; c {s['c_us']:.0f} us"
                        f" ({s['crowding']:.2f}x a lone node's), r {s['r']:.2f}"
                    )
                line += (
                    f"; CPU/op: nodes {s['node_us_per_op']:.0f} us, pg {s['pg_us_per_op']:.0f} us;"
                    f" model: nodes allow {s['node_bound_ops_s']:,.0f}, pg {s['pg_bound_ops_s']:,.0f}"
                )
                if size == 3 and workload in TARGETS:
                    target = TARGETS[workload]
                    line += f"; target >= {target}x: lone node {'met' if s['vs_one'] >= target else 'MISSED'}"
                    line += (
                        f", controlled {'met' if s['vs_one_controlled'] >= target else 'MISSED'}"
                    )
                print(line, flush=True)
    if "before" in models and "after" in models:
        for workload in MODELLED:
            after = models["after"].get(workload, {}).get("sizes", {})
            before = models["before"].get(workload, {}).get("sizes", {})
            for size in sorted(set(after) & set(before)):
                a, b = after[size], before[size]
                print(
                    f"after/before {workload} {size} node{'s' if size > 1 else ''}:"
                    f" {a['ops_s'] / b['ops_s']:.2f}x ops/s, node CPU per op"
                    f" {a['node_us_per_op'] / b['node_us_per_op']:.2f}x, pg CPU per op"
                    f" {a['pg_us_per_op'] / b['pg_us_per_op']:.2f}x",
                    flush=True,
                )
    return models


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--nodes", default="1,2,3", help="cluster sizes, comma-separated")
    parser.add_argument("--node-cpu", type=float, default=0.25, help="cores per node")
    parser.add_argument("--pg-cpu", type=float, default=0.5, help="cores for PostgreSQL")
    parser.add_argument("--load-cpu", type=float, default=0.5, help="cores for the load generator")
    parser.add_argument("--connections", type=int, default=16, help="per node")
    parser.add_argument(
        "--period-ms",
        type=int,
        default=PERIOD_MS,
        help="the quotas' period (cpu.cfs_period_us)",
    )
    parser.add_argument("--crdts", type=int, default=64)
    parser.add_argument(
        "--workloads",
        default=",".join(WORKLOADS),
        help=f"of spread, hot, {AFFINITY}, {FOLLOW}",
    )
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--control",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run each size as isolated nodes (default: yes)",
    )
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout to run (default: this)")
    parser.add_argument("--compare", type=Path, help="another checkout, run alternately")
    parser.add_argument("--json", help="also write every figure to this file")
    parser.add_argument("--profile", type=Path, help="py-spy every node in each run, into this dir")
    parser.add_argument("--clean", action="store_true", help="remove groups a killed run left")
    args = parser.parse_args(argv)
    if args.clean:
        for path in cgroups.remove_leftovers():
            print(f"removed {path}")
        return 0
    reason = cgroups.available()
    if reason is not None:
        print(f"cluster_scaling: {reason}", file=sys.stderr)
        return 2
    sizes = [int(n) for n in args.nodes.split(",")]
    workloads = tuple(args.workloads.split(","))
    if not set(workloads) <= {*MODELLED, FOLLOW}:
        parser.error(f"--workloads: of {', '.join((*WORKLOADS, FOLLOW))}")
    settings = Settings(
        args.duration, args.warmup, args.connections, args.crdts, workloads, args.profile
    )
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    codes = checkouts(args.code, args.compare)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)  # through the finally blocks: groups removed

    signal.signal(signal.SIGTERM, stop)
    results: list[dict[str, Any]] = []
    print(
        f"budgets: nodes {args.node_cpu} core each, PostgreSQL {args.pg_cpu}, load {args.load_cpu}"
        f" (per {args.period_ms} ms);"
        f" {args.connections} connections per node, {args.duration:.0f} s per run",
        flush=True,
    )
    with CpuBudgets(args.period_ms * 1000) as budgets, postgres(budgets, args.pg_cpu) as pg_url:
        run = budgets.run  # the groups' common name, for a check that none is left
        budgets.add("load", args.load_cpu)
        for k in range(max(sizes)):
            budgets.add(f"n{k}", args.node_cpu)
        for _ in range(args.rounds):
            for size in sizes:
                kinds = [CLUSTER, ISOLATED] if size > 1 and args.control else [CLUSTER]
                for kind in kinds:
                    for name, code in codes.items():
                        results += run_size(budgets, pg_url, size, code, settings, name, kind)
    models = summary(results, list(codes), args.node_cpu, args.pg_cpu)
    if args.json:
        with open(args.json, "w") as f:
            settings_out = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
            out = {"settings": settings_out, "runs": results, "models": models, "cgroups": run}
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
