"""The benchmark suite behind ``python -m perf`` (``make bench``).

Every benchmark runs as a child process (``python -m perf.<script> ...
--json FILE``) that starts its own fresh server(s), so one benchmark's
state, memory or crash cannot leak into the next; this module turns their
JSON into rows of one table: the workload, syncd's figure, the peer measured
in the same run, the ratio, the target from the issues, whether it was met,
and whether the load generator had headroom (a saturated generator measures
itself, not the server).

Servers are pinned to core 0, load generators to core 1 (perf.lib.servers). The
in-process benchmarks (RGA traces, auth cost) run pinned to core 0 too.
When ``wrk`` is installed, the HTTP servers are also measured with it (C,
one thread): the Python load generator can saturate before the raw uvloop
peer does, which would flatter every ratio against that peer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perf.lib.servers import (
    LOAD_CORE,
    ROOT,
    SERVER_CORE,
    bench_token,
    free_port,
    pinned,
    process,
    syncd,
)
from perf.lib.table import table

SATURATED = 0.90
"""Generator CPU (fraction of its core) above which its figure is its own limit."""
WRK_THREADS = 1
"""One wrk thread on the load core: the whole core, no more."""
RESULTS = ROOT / "perf" / "RESULTS.md"
DIRTY_SHOWN = 8
"""Uncommitted files named in the report; the rest are counted as "..."."""

OP_PATH = "/v1/namespaces/bench/crdts/gc:hits/ops"
OP_BODY = '{"op":"increment","amount":1}'
BATCH_OPS = 100
BATCH_BODY = "[" + ",".join([OP_BODY] * BATCH_OPS) + "]"


# -- rows ------------------------------------------------------------------------------


@dataclass
class Row:
    workload: str
    syncd: str
    peer: str = ""
    peer_figure: str = ""
    ratio: str = ""
    target: str = ""
    met: str = ""
    """"yes", "NO", or empty where there is no target (or no figure)."""
    generator: str = ""
    """The load generator and its CPU use, or why there is none."""


HEADER = ("workload", "syncd", "peer", "peer figure", "ratio", "target", "met", "generator")


def cells(row: Row) -> tuple[str, ...]:
    return tuple(str(v) for v in dataclasses.astuple(row))


def met(ok: bool) -> str:
    return "yes" if ok else "NO"


def rate(value: float, unit: str = "/s") -> str:
    return f"{value:,.0f}{unit}"


def gen_note(kind: str, *cpus: float | None) -> str:
    """``loadgen 45%`` (one run) or ``loadgen 45% / 80%`` (syncd's run / the peer's)."""
    shown = [f"{c:.0%}" for c in cpus if c is not None]
    note = f"{kind} {' / '.join(shown)}" if shown else kind
    if any(c is not None and c > SATURATED for c in cpus):
        note += " SATURATED"
    return note


# -- running children ----------------------------------------------------------------


@dataclass
class Context:
    quick: bool
    tmp: Path
    wrk: str | None
    log: Callable[[str], None] = print
    raw: dict[str, Any] = field(default_factory=dict)


def run_json(
    ctx: Context, module: str, args: Sequence[str], *, timeout: float, core: str | None = None
) -> Any:
    """Run ``python -m module args --json FILE`` and return what it wrote."""
    out = ctx.tmp / f"{module.rsplit('.', 1)[-1]}-{time.monotonic_ns()}.json"
    cmd = [sys.executable, "-m", module, *args, "--json", str(out)]
    if core is not None:
        cmd = pinned(cmd, core)
    ctx.log(f"$ {' '.join(cmd)}")
    sys.stdout.flush()
    proc = subprocess.run(cmd, cwd=ROOT, timeout=timeout, check=False)
    if not out.exists():
        raise RuntimeError(f"{module} exited with {proc.returncode} and wrote no results")
    result = json.loads(out.read_text())
    if proc.returncode != 0:
        result = {"_exit": proc.returncode, **result} if isinstance(result, dict) else result
    return result


# -- wrk ----------------------------------------------------------------------------------


def find_wrk() -> str | None:
    return shutil.which("wrk")


_WRK_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _wrk_ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if not m:
        raise ValueError(f"wrk latency {text!r}")
    return float(m.group(1)) * _WRK_UNITS[m.group(2)]


def parse_wrk(out: str) -> dict[str, Any]:
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if rps is None:
        raise RuntimeError(f"wrk printed no Requests/sec:\n{out}")
    pct = dict(re.findall(r"^\s+(50|99)%\s+(\S+)$", out, re.M))
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {
        "rps": float(rps.group(1)),
        "p50_ms": _wrk_ms(pct["50"]) if "50" in pct else None,
        "p99_ms": _wrk_ms(pct["99"]) if "99" in pct else None,
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": sum(map(int, errors.groups())) if errors else 0,
    }


def wrk_lua(path: Path, method: str, body: str, headers: Sequence[str]) -> None:
    lines = [f'wrk.method = "{method}"']
    if body:
        lines.append(f"wrk.body = [==[{body}]==]")
        lines.append('wrk.headers["Content-Type"] = "application/json"')
    for h in headers:
        name, _, value = h.partition(":")
        lines.append(f'wrk.headers["{name.strip()}"] = [==[{value.strip()}]==]')
    path.write_text("\n".join(lines) + "\n")


def wrk(
    ctx: Context,
    port: int,
    path: str,
    *,
    method: str = "GET",
    body: str = "",
    headers: Sequence[str] = (),
    connections: int = 32,
    duration: float = 5.0,
    warmup: float = 1.0,
) -> dict[str, Any]:
    """One wrk run on the load core after a warm-up run; its CPU from its rusage."""
    assert ctx.wrk is not None
    script = ctx.tmp / f"wrk-{time.monotonic_ns()}.lua"
    wrk_lua(script, method, body, headers)
    url = f"http://127.0.0.1:{port}{path}"

    def once(seconds: float) -> tuple[str, float, float]:
        secs = max(1, round(seconds))
        cmd = [ctx.wrk or "wrk", f"-t{WRK_THREADS}", f"-c{connections}", f"-d{secs}s"]
        cmd += ["--latency", "-s", str(script), url]
        started = time.perf_counter()
        proc = subprocess.Popen(pinned(cmd, LOAD_CORE), stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(f"wrk exited with {proc.returncode}:\n{out}")
        return out, usage.ru_utime + usage.ru_stime, wall

    if warmup > 0:
        once(warmup)
    out, cpu, wall = once(duration)
    result = parse_wrk(out)
    result["generator_cpu"] = cpu / wall / WRK_THREADS
    return result


# -- benchmarks ---------------------------------------------------------------------------


def failures(*results: dict[str, Any] | None) -> str:
    """``; N errors`` when any answer was not a 200 (a fast error is not a fast op)."""
    n = 0
    for r in results:
        if r is not None:
            n += sum(c for s, c in r.get("statuses", {}).items() if s != "200")
            n += int(r.get("non_2xx", 0)) + int(r.get("socket_errors", 0))
    return f"; {n:,} errors" if n else ""


def http_rows(figs: dict[str, dict[str, Any]], kind: str) -> list[Row]:
    """The HTTP targets from one generator's figures (keys as in :func:`bench_http`)."""
    rows: list[Row] = []

    def ratio_row(
        label: str, ours: str, theirs: str, peer: str, target: float | None, batch: bool = False
    ) -> None:
        a, b = figs.get(ours), figs.get(theirs)
        if a is None or b is None:
            return
        r = a["rps"] / b["rps"] if b["rps"] else float("nan")
        rows.append(
            Row(
                f"{label} [{kind.split()[0]}]",
                rate(a["rps"]),
                peer,
                rate(b["rps"]),
                f"{r:.2f}x",
                f">= {target:.2f}x" if target is not None else "",
                met(r >= target) if target is not None else "",
                gen_note(kind, a.get("generator_cpu"), b.get("generator_cpu")) + failures(a, b),
            )
        )

    ratio_row("HTTP GET /health/live (h11)", "syncd_h11_get", "h11_get", "bare h11 GET", 0.90)
    ratio_row(
        "HTTP GET /health/live (httptools)", "syncd_httptools_get", "h11_get", "bare h11 GET", None
    )
    ratio_row("HTTP increment (h11)", "syncd_h11_inc", "h11_post", "bare h11 POST", 0.85)
    ratio_row(
        "HTTP increment (h11)", "syncd_h11_inc", "starlette_h11", "uvicorn+Starlette (h11)", 1.5
    )
    ratio_row(
        "HTTP increment (httptools)",
        "syncd_httptools_inc",
        "starlette_httptools",
        "uvicorn+Starlette (httptools)",
        3.0,
    )
    ratio_row(
        "HTTP increment (httptools)", "syncd_httptools_inc", "uvloop_post", "raw uvloop POST", 0.40
    )
    for parser in ("h11", "httptools"):
        b = figs.get(f"syncd_{parser}_batch")
        if b is not None:
            ops = b["rps"] * BATCH_OPS
            rows.append(
                Row(
                    f"HTTP 100-op batches ({parser}), ops/s [{kind.split()[0]}]",
                    rate(ops),
                    target=">= 100,000/s",
                    met=met(ops >= 100_000),
                    generator=gen_note(kind, b.get("generator_cpu")) + failures(b),
                )
            )
    return rows


def bench_http(ctx: Context) -> list[Row]:
    duration = 0.5 if ctx.quick else 5.0
    connections = 8 if ctx.quick else 32
    r = run_json(
        ctx,
        "perf.bench.http_ops",
        ["--duration", str(duration), "--connections", str(connections)],
        timeout=900,
    )
    ctx.raw["http"] = {"loadgen": r}
    names = {
        "h11_get": "bare h11: GET",
        "h11_post": "bare h11: POST",
        "uvloop_post": "raw uvloop: POST",
        "starlette_h11": "uvicorn+starlette (h11): increment",
        "starlette_httptools": "uvicorn+starlette (httptools): increment",
    }
    for parser in ("h11", "httptools"):
        names[f"syncd_{parser}_get"] = f"syncd ({parser}): GET /health/live"
        names[f"syncd_{parser}_inc"] = f"syncd ({parser}): increment"
        names[f"syncd_{parser}_batch"] = f"syncd ({parser}): 100-op batch"
    figs = {key: r[name] for key, name in names.items() if isinstance(r.get(name), dict)}
    for key, fig in figs.items():
        bad = {s: n for s, n in fig.get("statuses", {}).items() if s != "200"}
        if bad:
            ctx.log(f"warning: {key} answered {bad}")
    rows = http_rows(figs, "loadgen")
    for parser in ("h11", "httptools"):
        half = r.get(f"syncd ({parser}): increment @ half peak")
        floor = r.get(f"raw uvloop: POST @ syncd ({parser}) half peak")
        if isinstance(half, dict):
            rows.append(
                Row(
                    f"HTTP increment p99 at half peak ({parser}, open loop)",
                    f"{half['p99_ms']:.2f} ms",
                    peer="raw uvloop POST, same rate" if isinstance(floor, dict) else "",
                    peer_figure=f"{floor['p99_ms']:.2f} ms" if isinstance(floor, dict) else "",
                    target="<= 5 ms",
                    met=met(half["p99_ms"] <= 5.0),
                    generator=gen_note("loadgen", half.get("generator_cpu")) + failures(half),
                )
            )
    if ctx.wrk is None:
        rows.append(
            Row("HTTP with wrk", "not run", generator="wrk not installed (apt-get install -y wrk)")
        )
        return rows
    wfigs = http_wrk(ctx, 1.0 if ctx.quick else duration, connections)
    ctx.raw["http"]["wrk"] = wfigs
    return rows + http_rows(wfigs, f"wrk -t{WRK_THREADS}")


def http_wrk(ctx: Context, duration: float, connections: int) -> dict[str, dict[str, Any]]:
    """The same servers as perf.bench.http_ops, measured with wrk."""
    figs: dict[str, dict[str, Any]] = {}
    warmup = 0.0 if ctx.quick else 1.0

    def measure(key: str, port: int, **kw: Any) -> None:
        figs[key] = r = wrk(
            ctx, port, duration=duration, connections=connections, warmup=warmup, **kw
        )
        ctx.log(
            f"  wrk {key:<22} {r['rps']:>10.0f} req/s  p99 {r['p99_ms']} ms"
            f"  wrk CPU {r['generator_cpu']:.0%}  non-2xx {r['non_2xx']}"
        )

    def peer(module: str, *extra: str) -> tuple[list[str], int]:
        port = free_port()
        return [sys.executable, "-m", module, str(port), *extra], port

    cmd, port = peer("perf.peers.bare_h11")
    with process(cmd, port):
        measure("h11_get", port, path="/health/live")
        measure("h11_post", port, path=OP_PATH, method="POST", body=OP_BODY)
    cmd, port = peer("perf.peers.raw_uvloop")
    with process(cmd, port):
        measure("uvloop_post", port, path=OP_PATH, method="POST", body=OP_BODY)
    for http in ("h11", "httptools"):
        cmd, port = peer("perf.peers.starlette_app", http)
        with process(cmd, port):
            measure(f"starlette_{http}", port, path=OP_PATH, method="POST", body=OP_BODY)
    for parser in ("h11", "httptools"):
        with syncd({"SERVICE_HTTP_PARSER": parser, "SERVICE_FSYNC": "batch"}) as (port, _):
            auth = [f"authorization: Bearer {bench_token(port)}"]
            measure(f"syncd_{parser}_get", port, path="/health/live")
            kw: dict[str, Any] = {"path": OP_PATH, "method": "POST", "headers": auth}
            measure(f"syncd_{parser}_inc", port, body=OP_BODY, **kw)
            measure(f"syncd_{parser}_batch", port, body=BATCH_BODY, **kw)
    return figs


def bench_ws_ingest(ctx: Context) -> list[Row]:
    args = ["--duration", "1", "--warmup", "0.5"] if ctx.quick else ["--duration", "10"]
    r = run_json(ctx, "perf.bench.ws_ingest", args, timeout=300)
    ctx.raw["ws-ingest"] = r
    return [
        Row(
            f"WS ingest: acked durable ops/s (1 connection, {r['window']} in flight, fsync batch)",
            rate(r["ops_per_s"]),
            target=">= 20,000/s",
            met=met(r["ops_per_s"] >= 20_000),
            generator=gen_note("client", r["client_cpu"]) + f"; server {r['server_cpu']:.0%}",
        )
    ]


def bench_ws_fanout(ctx: Context) -> list[Row]:
    subscribers = 50 if ctx.quick else 1000
    args = ["--subscribers", str(subscribers)]
    args += ["--duration", "1", "--warmup", "0.5"] if ctx.quick else ["--duration", "10"]
    r = run_json(ctx, "perf.bench.ws_fanout", args, timeout=300)
    ctx.raw["ws-fanout"] = r
    offered = r["rate"] * r["subscribers"]
    note = gen_note("subscribers", r["subscriber_cpu"]) + f"; server {r['server_cpu']:.0%}"
    p99 = r["p99_ms"]
    return [
        Row(
            f"WS fan-out to {subscribers} subscribers: deliveries/s"
            f" ({offered:,.0f}/s offered, {r['resyncs']} resyncs)",
            rate(r["deliveries_per_s"]),
            target=">= 300,000/s",
            met=met(r["deliveries_per_s"] >= 300_000),
            generator=note,
        ),
        Row(
            f"WS fan-out to {subscribers} subscribers: delivery p99",
            f"{p99:.1f} ms" if p99 is not None else "no deliveries",
            target="<= 50 ms",
            met=met(p99 is not None and p99 <= 50.0),
            generator=note,
        ),
    ]


def bench_ws_idle(ctx: Context) -> list[Row]:
    connections = 200 if ctx.quick else 10_000
    r = run_json(ctx, "perf.bench.ws_idle", ["--connections", str(connections)], timeout=600)
    ctx.raw["ws-idle"] = r
    return [
        Row(
            f"WS idle: server RSS per connection ({connections:,}, one CRDT each)",
            f"{r['per_conn'] / 1024:.1f} KiB",
            target="<= 20 KB",
            met=met(r["per_conn"] <= 20 * 1024),
            generator="n/a (idle)",
        )
    ]


def bench_rga(ctx: Context) -> list[Row]:
    if ctx.quick:
        args = ["--max-patches", "1000", "--repeat", "1", "--min-chars", "2000"]
    else:
        args = ["--repeat", "3", "--pycrdt-repeat", "1"]
    r = run_json(ctx, "perf.bench.rga_peers", args, timeout=1800, core=SERVER_CORE)
    ctx.raw["rga"] = r
    rows: list[Row] = []
    note = "in-process (no generator)"

    def check(ok: bool | None) -> str:
        return "" if ok in (True, None) else " WRONG TEXT"

    for s in r["sequential"]:
        name = s["trace"].removesuffix(".json.gz")
        ratio = s["rga_s"] / s["list_s"]
        rows.append(
            Row(
                f"RGA replay {name} ({s['patches']:,} patches)",
                f"{s['rga_s']:.3f} s{check(s['rga_ok'])}",
                "list splicing",
                f"{s['list_s']:.3f} s{check(s['list_ok'])}",
                f"{ratio:.2f}x",
                "<= 1.5x",
                met(ratio <= 1.5 and s["rga_ok"]),
                note,
            )
        )
        if s["pycrdt_s"] is not None:
            rows.append(
                Row(
                    f"RGA replay {name} ({s['patches']:,} patches)",
                    f"{s['rga_s']:.3f} s",
                    "pycrdt (1 txn/patch)",
                    f"{s['pycrdt_s']:.3f} s{check(s['pycrdt_ok'])}",
                    f"{s['rga_s'] / s['pycrdt_s']:.2f}x",
                    generator=note,
                )
            )
    for m in r["memory"]:
        name = m["trace"].removesuffix(".json.gz")
        rows.append(
            Row(
                f"RGA final document, {name} x{m['copies']} ({m['final_length']:,} chars)",
                f"{m['final_mb']:.1f} MB (peak {m['peak_mb']:.1f})",
                target="< 50 MB" if m["final_length"] >= 100_000 else "n/a (< 100k chars)",
                met=met(m["final_mb"] < 50.0) if m["final_length"] >= 100_000 else "",
                generator="tracemalloc",
            )
        )
    for c in r["concurrent"]:
        name = c["trace"].removesuffix(".json.gz")
        pycrdt = c["pycrdt_s"]
        rows.append(
            Row(
                f"RGA concurrent replay {name} ({c['agents']} agents, {c['txns']:,} txns)",
                f"{c['rga_s']:.3f} s{check(c['rga_ok'])}",
                "pycrdt (update exchange)" if pycrdt is not None else "",
                f"{pycrdt:.3f} s{check(c['pycrdt_ok'])}" if pycrdt is not None else "",
                f"{c['rga_s'] / pycrdt:.2f}x" if pycrdt else "",
                generator=note,
            )
        )
    return rows


def bench_durability(ctx: Context) -> list[Row]:
    if ctx.quick:
        args = ["--writers", "8", "--duration", "0.5", "--warmup", "0.3", "--rounds", "1"]
    else:
        args = ["--writers", "50", "--duration", "5", "--rounds", "2"]
    r = run_json(ctx, "perf.bench.durability", args, timeout=600)
    ctx.raw["durability"] = r
    batch, never = r["batch"], r["never"]
    ratio = r["ratio"] or 0.0
    rows = [
        Row(
            f"Durability: {r['writers']} HTTP writers, increments, fsync=batch",
            rate(batch["rps"]),
            "same, fsync=never",
            rate(never["rps"]),
            f"{ratio:.2f}x",
            ">= 0.80x",
            met(ratio >= 0.80),
            gen_note("loadgen", batch["generator_cpu"], never["generator_cpu"])
            + failures(batch, never),
        )
    ]
    if r.get("log_bytes_per_op"):
        rows.append(
            Row(
                "Log bytes per gcounter increment (server, HTTP)",
                f"{r['log_bytes_per_op']:.0f} B",
                generator="n/a",
            )
        )
    return rows


def bench_restart(ctx: Context) -> list[Row]:
    if ctx.quick:
        args = ["--ops", "20000", "--crdts", "200", "--repeat", "1"]
    else:
        args = ["--ops", "1000000", "--crdts", "10000", "--repeat", "3"]
    r = run_json(ctx, "perf.bench.restart", args, timeout=1800)
    ctx.raw["restart"] = r
    size = f"{r['ops']:,} ops / {r['crdts']:,} CRDTs"
    rows = []
    for key, label in (("without_snapshot", "log only"), ("with_snapshot", "snapshot")):
        s = r[key]
        rows.append(
            Row(
                f"Restart to ready, {size}, {label}",
                f"{s['seconds']:.2f} s (RSS {s['rss_mb']:.0f} MB)",
                target="<= 5 s",
                met=met(s["seconds"] <= 5.0),
                generator="n/a",
            )
        )
    rows.append(
        Row(
            f"Log bytes per gcounter increment (engine records, {size})",
            f"{r['log_bytes_per_op']:.0f} B",
            generator="n/a",
        )
    )
    return rows


def pg_url() -> str | None:
    """An existing server (SYNCD_BENCH_PG); None: perf.bench.pg_store starts a throw-away one."""
    return os.environ.get("SYNCD_BENCH_PG")


def pg_reachable(url: str) -> str | None:
    """None when a connection works, else why not."""
    try:
        import psycopg

        with psycopg.connect(f"{url}/postgres", connect_timeout=3):
            return None
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"


def bench_pg(ctx: Context) -> list[Row]:
    url = pg_url()
    if url is not None:
        why = pg_reachable(url)
        if why is not None:
            return [Row("PostgreSQL store", "skipped", generator=f"PostgreSQL unreachable ({why})")]
    args = ["--ops", "200", "--samples", "15", "--load-seconds", "2"] if ctx.quick else []
    if url is not None:
        args += ["--pg", url]
    r = run_json(ctx, "perf.bench.pg_store", args, timeout=900)
    ctx.raw["pg"] = r
    rows: list[Row] = []
    for label, target in (("spread", 0.6), ("hot", 0.5)):
        emb, pg = r.get(f"{label}: embedded log (fsync=batch)"), r.get(f"{label}: PostgreSQL")
        if emb and pg:
            ratio = pg["ops_per_s"] / emb["ops_per_s"]
            rows.append(
                Row(
                    f"PostgreSQL store: increments/s, one node, {label}",
                    f"{rate(pg['ops_per_s'])} (p99 {pg['p99_ms']:.1f} ms)",
                    "embedded log, fsync=batch",
                    f"{rate(emb['ops_per_s'])} (p99 {emb['p99_ms']:.1f} ms)",
                    f"{ratio:.2f}x",
                    target=f">= {target}x",
                    met=met(ratio >= target),
                    generator="asyncio client (in the child)",
                )
            )
    three, hot = r.get("three nodes, one hot CRDT: together"), r.get("hot: PostgreSQL")
    if three and hot:
        ratio = three["ops_per_s"] / hot["ops_per_s"]
        rows.append(
            Row(
                "PostgreSQL: three nodes on one hot CRDT, together",
                f"{rate(three['ops_per_s'])} (p99 {three['p99_ms']:.1f} ms)",
                "one node, hot",
                rate(hot["ops_per_s"]),
                f"{ratio:.2f}x",
                target=">= 1x",
                met=met(ratio >= 1),
                generator="asyncio client (in the child)",
            )
        )
    for name, fig in r.items():
        if "->B" in name:
            under_load = name.startswith("under load")
            rows.append(
                Row(
                    f"Cross-node latency, {name}",
                    f"p50 {fig['p50_ms']:.1f} ms, p99 {fig['p99_ms']:.1f} ms",
                    target="p99 <= 10 ms" if under_load else "",
                    met=met(fig["p99_ms"] <= 10) if under_load else "",
                    generator="half of peak load on A" if under_load else "one op at a time",
                )
            )
    return rows


def bench_auth(ctx: Context) -> list[Row]:
    n = "5000" if ctx.quick else "200000"
    r = run_json(ctx, "perf.bench.auth_cost", ["--n", n], timeout=300, core=SERVER_CORE)
    ctx.raw["auth"] = r
    return [
        Row(
            "Auth per request, warm token cache (authenticate + check_write)",
            f"{r['warm_us']:.2f} us",
            target="<= 5 us",
            met=met(r["warm_us"] <= 5.0),
            generator="in-process (no generator)",
        ),
        Row(
            "Auth per request, cold (ed25519 verify each time)",
            f"{r['cold_us']:.1f} us",
            generator="in-process (no generator)",
        ),
    ]


BENCHMARKS: dict[str, tuple[Callable[[Context], list[Row]], str]] = {
    "http": (bench_http, "HTTP ops, single and batched, vs bare h11, raw uvloop, Starlette"),
    "ws-ingest": (bench_ws_ingest, "WebSocket ingest, acked durable ops/s"),
    "ws-fanout": (bench_ws_fanout, "WebSocket fan-out to 1000 subscribers"),
    "ws-idle": (bench_ws_idle, "10k idle WebSocket connections, RSS each"),
    "rga": (bench_rga, "editing traces: rga vs list splicing vs pycrdt"),
    "durability": (bench_durability, "50 HTTP writers, fsync=batch vs never"),
    "restart": (bench_restart, "restart time, 1M ops over 10k CRDTs"),
    "pg": (bench_pg, "PostgreSQL store and cross-node latency"),
    "auth": (bench_auth, "auth cost per request"),
}


def normalize(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def select(only: str | None) -> list[str]:
    if not only:
        return list(BENCHMARKS)
    names = [normalize(n) for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; choose from {', '.join(BENCHMARKS)}")
    return [n for n in BENCHMARKS if n in names]


# -- the machine ------------------------------------------------------------------------


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
    """perf.cpu_index on the server core: how fast the machine is right now."""
    cmd = pinned([sys.executable, "-m", "perf.cpu_index", "--json"], SERVER_CORE)
    try:
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
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


def machine() -> dict[str, Any]:
    mem = memory_gib()
    wrk_path = find_wrk()
    wrk_version = ""
    if wrk_path:
        out = subprocess.run([wrk_path, "--version"], capture_output=True, text=True)
        text = (out.stdout or out.stderr).strip()
        wrk_version = text.splitlines()[0].split(" Copyright")[0] if text else ""
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(mem, 1) if mem else None,
        "kernel": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "wrk": wrk_version or None,
        "server_core": SERVER_CORE,
        "load_core": LOAD_CORE,
    }


# -- output -----------------------------------------------------------------------------


def markdown_table(rows: Sequence[Row]) -> str:
    def esc(s: str) -> str:
        return s.replace("|", "\\|")

    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(esc(c) for c in cells(r)) + " |" for r in rows]
    return "\n".join(lines)


def _index(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "not measured"


def duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} minutes" if seconds >= 120 else f"{seconds:.0f} s"


def results_markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    errors = report["errors"]
    out = [
        "# Benchmark results",
        "",
        f"Written by `{report['command']}` (`make bench`) on {report['started']} UTC,"
        f" commit {report['commit']}; the run took {duration(report['seconds'])}.",
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu']}, {m['cores']} cores; memory {m['memory_gib']} GiB",
        f"- Kernel: {m['kernel']}; Python {m['python']}; wrk: {m['wrk'] or 'not installed'}",
        f"- Load average (1, 5, 15 min) at the start: {report['load_start']};"
        f" at the end: {report['load_end']}",
        f"- Servers pinned to core {m['server_core']}, load generators to core {m['load_core']}.",
        f"- CPU speed index (`python -m perf.cpu_index` on the server core, microseconds;"
        f" lower is faster) at the start: {_index(report.get('cpu_index_start'))};"
        f" at the end: {_index(report.get('cpu_index_end'))}. The same code's figures move"
        " with it: compare two runs only next to their indexes.",
        "",
        "**This machine is shared.** Other agents were building and testing on the same"
        " two cores during the run (see the load averages), so every figure here is noisy"
        " and most are lower than the same code would give on a quiet machine; the peers"
        " were measured in the same run under the same conditions, which keeps the ratios"
        " more meaningful than the absolute numbers.",
        "",
        "## Results",
        "",
        markdown_table([Row(**r) for r in report["rows"]]),
        "",
        "## Reading the table",
        "",
        "- *ratio* is syncd's figure over the peer's, in the row's unit (for times, a ratio"
        " above 1 means syncd is slower).",
        "- *generator* is what drove the load and its CPU use as a share of its core"
        " (`a / b`: syncd's run / the peer's run); above"
        f" {SATURATED:.0%} it is marked SATURATED: that figure is the generator's limit, not"
        " the server's. `loadgen` is perf.lib.loadgen (Python, uvloop, one process on the load"
        f" core); `wrk -t{WRK_THREADS}` is wrk with one thread on the load core.",
        "- HTTP rows with wrk repeat the loadgen rows with a generator that is not the"
        " bottleneck for the fixed-response peers; the p99 at half peak needs an open-loop"
        " generator and is measured with loadgen only.",
        "- Each benchmark is `python -m perf.<module>`; see the module docstrings for the"
        " method, and `python -m perf --json PATH` for every raw figure.",
        "- Every target marked NO has a profile (`make profile BENCH=<name> FORMAT=raw`) and"
        " an account of where its time goes in [profiles/README.md](profiles/README.md).",
    ]
    if errors:
        out += ["", "## Failures", ""]
        out += [f"- `{name}`: {msg}" for name, msg in errors.items()]
    return "\n".join(out) + "\n"


def run_suite(
    names: Sequence[str],
    *,
    quick: bool,
    json_path: str | None,
    results_path: str | None,
    command: str,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    started = time.time()
    report: dict[str, Any] = {
        "command": command,
        "started": datetime.datetime.fromtimestamp(started, datetime.UTC).strftime(
            "%Y-%m-%d %H:%M"
        ),
        "commit": git_commit(),
        "quick": quick,
        "benchmarks": list(names),
        "machine": machine(),
        "load_start": load_average(),
        "cpu_index_start": cpu_index(),
    }
    rows: list[Row] = []
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="syncd-suite-") as tmp:
        ctx = Context(quick=quick, tmp=Path(tmp), wrk=find_wrk(), log=log)
        for name in names:
            fn, about = BENCHMARKS[name]
            log(f"\n== {name}: {about}")
            t0 = time.monotonic()
            try:
                got = fn(ctx)
            except Exception as exc:
                msg = f"{type(exc).__name__}: {exc}"
                errors[name] = msg
                got = [Row(name, "FAILED", generator=msg[:120])]
            rows += got
            log(f"   ({time.monotonic() - t0:.0f} s)")
        report["raw"] = ctx.raw
    report["load_end"] = load_average()
    report["cpu_index_end"] = cpu_index()
    report["seconds"] = time.time() - started
    report["rows"] = [dataclasses.asdict(r) for r in rows]
    report["errors"] = errors
    log("")
    log(table([cells(r) for r in rows], HEADER))
    log(f"\nload average at the start {report['load_start']}, at the end {report['load_end']}")
    log(
        f"cpu index at the start {_index(report['cpu_index_start'])} us,"
        f" at the end {_index(report['cpu_index_end'])} us"
    )
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2) + "\n")
        log(f"JSON: {json_path}")
    if results_path:
        Path(results_path).write_text(results_markdown(report))
        log(f"Markdown: {results_path}")
    return report
