"""``make profile BENCH=<name>``: a flame graph of the server under one workload.

py-spy samples the server process (``py-spy record -o perf/out/<name>.svg
--pid <server pid>``) while the workload runs, then the SVG's path is
printed. Three kinds of workload:

* HTTP load from perf.lib.loadgen against a server started here (``http``,
  ``http-h11``, ``batch``, ``health``, ``durability``): recorded for
  ``--duration`` seconds after a warm-up;
* a benchmark script that starts its own servers (``ws-ingest``,
  ``ws-fanout``, ``ws-idle``, ``restart``, ``pg``): every ``python -m syncd``
  among its descendants is recorded from when it appears until it exits,
  as ``<name>.svg``, ``<name>-2.svg``, ... in start order;
* an in-process benchmark (``rga``, ``auth``): the benchmark process itself.

With ``--raw`` (``make profile BENCH=<name> FORMAT=raw``) py-spy writes
folded stacks (``<name>.folded.gz``) instead of an SVG, and a readable summary
of them (``<name>.md``, by perf.tools.profile_summary) is written beside them: the
form in which profiles are committed under ``perf/profiles/``.

``--missed`` (``make profiles``) does that for every workload with a missed
target, into perf/profiles/.

Usage: python -m perf.tools.profile NAME [--duration S] [--out DIR] [--raw] | --missed
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from perf.bench.http_ops import BATCH_BODY, OP_BODY, OP_PATH
from perf.lib.loadgen import loadgen
from perf.lib.servers import LOAD_CORE, ROOT, SERVER_CORE, bench_token, pinned, syncd
from perf.lib.traces import default_traces
from perf.tools.profile_summary import summarize

OUT = ROOT / "perf" / "out"
POLL_S = 0.01
"""How often a child's process tree is scanned for new servers."""
ATTACH_TRIES = 50
"""py-spy may fail on an interpreter that is still starting; tries per server."""
STOP_TIMEOUT_S = 60.0
SUFFIX = ".svg"
"""What py-spy writes: ``.svg`` (a flame graph) or ``.folded`` (``--raw``)."""


def py_spy_format() -> list[str]:
    return ["--format", "raw", "--threads"] if SUFFIX == ".folded" else []


@dataclass
class HttpLoad:
    env: dict[str, str]
    path: str
    method: str = "POST"
    body: str = OP_BODY
    connections: int = 32
    auth: bool = True


@dataclass
class Child:
    args: Callable[[float], list[str]]
    """The benchmark's arguments for a run of about this many seconds."""


@dataclass
class InProcess:
    args: list[str] = field(default_factory=list)


Workload = HttpLoad | tuple[str, Child] | tuple[str, InProcess]

WORKLOADS: dict[str, Workload] = {
    "http": HttpLoad({"SERVICE_FSYNC": "batch"}, OP_PATH),
    "http-h11": HttpLoad({"SERVICE_FSYNC": "batch", "SERVICE_HTTP_PARSER": "h11"}, OP_PATH),
    "batch": HttpLoad({"SERVICE_FSYNC": "batch"}, OP_PATH, body=BATCH_BODY),
    "health": HttpLoad({}, "/health/live", method="GET", body="", auth=False),
    "durability": HttpLoad({"SERVICE_FSYNC": "batch"}, OP_PATH, connections=50),
    "ws-ingest": ("perf.bench.ws_ingest", Child(lambda d: ["--duration", str(d)])),
    "ws-fanout": ("perf.bench.ws_fanout", Child(lambda d: ["--duration", str(d)])),
    "ws-idle": ("perf.bench.ws_idle", Child(lambda d: [])),
    "restart": ("perf.bench.restart", Child(lambda d: ["--repeat", "1"])),
    "pg": ("perf.bench.pg_store", Child(lambda d: [])),
    "rga": ("perf.bench.rga_peers", InProcess(["--pycrdt-repeat", "0", "--repeat", "1"])),
    "rga-svelte": (
        "perf.studies.rga_trace",
        InProcess([str(default_traces() / "sveltecomponent.json.gz"), "--repeat", "100"]),
    ),
    "auth": ("perf.bench.auth_cost", InProcess()),
}


def py_spy() -> str:
    found = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if found is None:
        raise SystemExit("py-spy is not installed: pip install -e '.[bench]'")
    return found


def record(out: Path, pid: int) -> subprocess.Popen[bytes]:
    # On the load core: sampling costs CPU that should not come out of the server's.
    return subprocess.Popen(
        pinned([py_spy(), "record", *py_spy_format(), "-o", str(out), "--pid", str(pid)], LOAD_CORE)
    )


def stop(spy: subprocess.Popen[bytes]) -> None:
    """SIGINT makes py-spy write its flame graph and exit."""
    if spy.poll() is None:
        spy.send_signal(signal.SIGINT)
    try:
        spy.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        spy.kill()
        spy.wait()


def profile_http(name: str, load: HttpLoad, duration: float, out_dir: Path) -> list[Path]:
    out = out_dir / f"{name}{SUFFIX}"
    with syncd(load.env) as (port, proc):
        headers = [f"authorization: Bearer {bench_token(port)}"] if load.auth else []
        kw: dict[str, Any] = {
            "path": load.path,
            "method": load.method,
            "body": load.body,
            "headers": headers,
        }
        loadgen(port, connections=load.connections, duration=1.0, warmup=0.0, **kw)
        spy = record(out, proc.pid)
        try:
            r = loadgen(port, connections=load.connections, duration=duration, warmup=0.0, **kw)
        finally:
            stop(spy)
    print(f"{name}: {r['rps']:.0f} req/s under py-spy, statuses {r['statuses']}")
    return [out]


def children(root: int) -> set[int]:
    """Every live descendant of ``root``."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            parents.setdefault(ppid, []).append(int(entry))
    found: set[int] = set()
    stack = [root]
    while stack:
        for pid in parents.get(stack.pop(), []):
            if pid not in found:
                found.add(pid)
                stack.append(pid)
    return found


def is_server(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    if not argv or os.path.basename(argv[0]) == b"taskset":
        return False
    return any(a == b"-m" and b == b"syncd" for a, b in pairwise(argv))


def profile_child(name: str, module: str, args: list[str], out_dir: Path) -> list[Path]:
    cmd = [sys.executable, "-m", module, *args]
    print("$", " ".join(cmd), flush=True)
    child = subprocess.Popen(cmd, cwd=ROOT)
    spies: dict[int, tuple[Path, subprocess.Popen[bytes], int]] = {}
    outs: list[Path] = []
    while True:
        done = child.poll() is not None
        for pid in sorted(children(child.pid)) if not done else []:
            if pid not in spies and is_server(pid):
                out = out_dir / (
                    f"{name}{SUFFIX}" if not outs else f"{name}-{len(outs) + 1}{SUFFIX}"
                )
                outs.append(out)
                spies[pid] = (out, record(out, pid), 1)
        for pid, (out, spy, tries) in list(spies.items()):
            # A failed attach to a server still alive: the interpreter was starting.
            if (
                spy.poll() not in (None, 0)
                and tries < ATTACH_TRIES
                and os.path.exists(f"/proc/{pid}")
            ):
                time.sleep(POLL_S)
                spies[pid] = (out, record(out, pid), tries + 1)
        if done:
            break
        time.sleep(POLL_S)
    for _, spy, _ in spies.values():
        stop(spy)
    if child.returncode:
        print(f"{module} exited with {child.returncode}", file=sys.stderr)
    return [o for o in outs if o.exists()]


def profile_in_process(name: str, module: str, args: list[str], out_dir: Path) -> list[Path]:
    out = out_dir / f"{name}{SUFFIX}"
    cmd = pinned([sys.executable, "-m", module, *args], SERVER_CORE)
    subprocess.run(
        [py_spy(), "record", *py_spy_format(), "-o", str(out), "--", *cmd], cwd=ROOT, check=False
    )
    return [out] if out.exists() else []


MISSED = ("http", "http-h11", "rga-svelte")
"""The workloads whose targets perf/RESULTS.md marks missed: ``--missed`` profiles them all
into perf/profiles/ (``make profiles``), where perf/profiles/README.md reads them."""
COMMITTED = ROOT / "perf" / "profiles"


def profile_one(name: str, duration: float, out_dir: Path, raw: bool) -> int:
    workload = WORKLOADS[name]
    if isinstance(workload, HttpLoad):
        outs = profile_http(name, workload, duration, out_dir)
    else:
        module, how = workload
        if isinstance(how, Child):
            outs = profile_child(name, module, how.args(duration), out_dir)
        else:
            outs = profile_in_process(name, module, how.args, out_dir)
    if not outs:
        print(f"{name}: no profile was written", file=sys.stderr)
        return 1
    for out in outs:
        if raw:
            packed = out.with_name(out.name + ".gz")
            with out.open("rb") as src, gzip.open(packed, "wb") as dst:
                shutil.copyfileobj(src, dst)
            out.unlink()
            summary = out.with_suffix(".md")
            summary.write_text(summarize(packed, title=f"Profile: {out.stem}"))
            print(f"folded stacks: {packed}\nsummary: {summary}")
        else:
            print(f"flame graph: {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("name", nargs="?", help=f"one of: {', '.join(WORKLOADS)}")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load")
    parser.add_argument("--out", help="where the profiles go (default perf/out, or perf/profiles)")
    parser.add_argument("--raw", action="store_true", help="folded stacks and a summary")
    parser.add_argument(
        "--missed", action="store_true", help="every workload with a missed target, --raw"
    )
    args = parser.parse_args(argv)
    global SUFFIX
    raw = args.raw or args.missed
    SUFFIX = ".folded" if raw else ".svg"
    if args.missed:
        names = list(MISSED)
    else:
        name = (args.name or "").strip().lower().replace("_", "-")
        if name not in WORKLOADS:
            parser.error(f"name a workload (BENCH=...): {', '.join(WORKLOADS)}")
        names = [name]
    py_spy()
    out_dir = Path(args.out) if args.out else (COMMITTED if args.missed else OUT)
    out_dir.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in names:
        print(f"== {name}", flush=True)
        failed += profile_one(name, args.duration, out_dir, raw)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
