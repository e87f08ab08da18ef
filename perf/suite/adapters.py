"""From each benchmark's JSON to rows of the suite's table: one adapter per benchmark.

An adapter is a pure function: it takes what the benchmark wrote with
``--json`` and returns :class:`~perf.suite.report.Row` objects (the workload,
syncd's figure, the peer measured in the same run and its figure, their
ratio, the target and whether it was met, and what the load generator was
doing). It runs nothing, so it is tested on canned figures. Targets come
from the one table in perf.suite.registry; :data:`ADAPTERS` has one entry per
benchmark there, under the same name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perf.bench.http_ops import BATCH_OPS
from perf.lib.wrk import WRK_THREADS
from perf.suite.registry import RGA_DOCUMENT_CHARS, TARGETS, Target
from perf.suite.report import Row, gen_note, met, rate

Adapter = Callable[[Any], list[Row]]


def failures(*results: dict[str, Any] | None) -> str:
    """``; N errors`` when any answer was not a 200 (a fast error is not a fast op)."""
    n = 0
    for r in results:
        if r is not None:
            n += sum(c for s, c in r.get("statuses", {}).items() if s != "200")
            n += int(r.get("non_2xx", 0)) + int(r.get("socket_errors", 0))
    return f"; {n:,} errors" if n else ""


def judged(target: Target, figure: float) -> dict[str, str]:
    """The row's ``target`` and ``met`` cells for ``figure``."""
    return {"target": str(target), "met": met(target.met(figure))}


# -- HTTP -----------------------------------------------------------------------------------

HTTP_LOADGEN_NAMES = {
    "h11_get": "bare h11: GET",
    "h11_post": "bare h11: POST",
    "uvloop_post": "raw uvloop: POST",
    "starlette_h11": "uvicorn+starlette (h11): increment",
    "starlette_httptools": "uvicorn+starlette (httptools): increment",
    **{
        f"syncd_{parser}_{kind}": f"syncd ({parser}): {what}"
        for parser in ("h11", "httptools")
        for kind, what in (
            ("get", "GET /health/live"),
            ("inc", "increment"),
            ("batch", "100-op batch"),
        )
    },
}
"""perf.bench.http_ops's workload names under the keys perf.bench.http_wrk uses."""

HTTP_RATIOS: tuple[tuple[str, str, str, str, str | None], ...] = (
    # (workload, syncd's key, the peer's key, the peer, target)
    (
        "HTTP GET /health/live (h11)",
        "syncd_h11_get",
        "h11_get",
        "bare h11 GET",
        "http.get-h11/bare-h11",
    ),
    ("HTTP GET /health/live (httptools)", "syncd_httptools_get", "h11_get", "bare h11 GET", None),
    (
        "HTTP increment (h11)",
        "syncd_h11_inc",
        "h11_post",
        "bare h11 POST",
        "http.increment-h11/bare-h11",
    ),
    (
        "HTTP increment (h11)",
        "syncd_h11_inc",
        "starlette_h11",
        "uvicorn+Starlette (h11)",
        "http.increment-h11/starlette",
    ),
    (
        "HTTP increment (httptools)",
        "syncd_httptools_inc",
        "starlette_httptools",
        "uvicorn+Starlette (httptools)",
        "http.increment-httptools/starlette",
    ),
    (
        "HTTP increment (httptools)",
        "syncd_httptools_inc",
        "uvloop_post",
        "raw uvloop POST",
        "http.increment-httptools/raw-uvloop",
    ),
)


def http_rows(figs: dict[str, dict[str, Any]], kind: str) -> list[Row]:
    """The HTTP targets from one generator's figures (keyed as in :data:`HTTP_LOADGEN_NAMES`)."""
    rows: list[Row] = []
    tag = f"[{kind.split()[0]}]"
    for label, ours, theirs, peer, key in HTTP_RATIOS:
        a, b = figs.get(ours), figs.get(theirs)
        if a is None or b is None:
            continue
        r = a["rps"] / b["rps"] if b["rps"] else float("nan")
        rows.append(
            Row(
                f"{label} {tag}",
                rate(a["rps"]),
                peer,
                rate(b["rps"]),
                f"{r:.2f}x",
                **(judged(TARGETS[key], r) if key else {}),
                generator=gen_note(kind, a.get("generator_cpu"), b.get("generator_cpu"))
                + failures(a, b),
            )
        )
    for parser in ("h11", "httptools"):
        b = figs.get(f"syncd_{parser}_batch")
        if b is not None:
            ops = b["rps"] * BATCH_OPS
            rows.append(
                Row(
                    f"HTTP {BATCH_OPS}-op batches ({parser}), ops/s {tag}",
                    rate(ops),
                    **judged(TARGETS["http.batch-ops"], ops),
                    generator=gen_note(kind, b.get("generator_cpu")) + failures(b),
                )
            )
    return rows


def http(r: dict[str, Any]) -> list[Row]:
    """perf.bench.http_ops: the ratios to the peers, batches, and the p99 at half peak."""
    figs = {
        key: r[name] for key, name in HTTP_LOADGEN_NAMES.items() if isinstance(r.get(name), dict)
    }
    rows = http_rows(figs, "loadgen")
    target = TARGETS["http.p99-at-half-peak"]
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
                    **judged(target, half["p99_ms"]),
                    generator=gen_note("loadgen", half.get("generator_cpu")) + failures(half),
                )
            )
    return rows


HTTP_CPU_PEERS: tuple[tuple[str, str, str | None], ...] = (
    # (the peer's key, the peer, target of its CPU per request over syncd's)
    (
        "samework_httptools",
        "Starlette doing syncd's work (same-work peer)",
        "http.increment-cpu/same-work",
    ),
    (
        "starlette_httptools",
        "uvicorn+Starlette in memory (httptools)",
        "http.increment-cpu/starlette",
    ),
    ("uvloop_post", "raw uvloop POST", None),
)


def http_cpu_rows(figs: dict[str, dict[str, Any]], kind: str) -> list[Row]:
    """Issue #35's measure: the server's CPU per durable increment (httptools),
    and each peer's CPU per request over syncd's (how many times syncd's cost
    it spends); the CPU per op of 100-op batches."""
    tag = f"[{kind.split()[0]}]"
    ours = figs.get("syncd_httptools_inc")
    if ours is None or "us_per_request" not in ours:
        return []
    us = ours["us_per_request"]
    label = f"HTTP increment (httptools): server CPU per request {tag}"
    rows = [
        Row(
            label,
            f"{us:.1f} us",
            **judged(TARGETS["http.increment-cpu"], us),
            generator=gen_note(kind, ours.get("generator_cpu")) + failures(ours),
        )
    ]
    for key, peer, target in HTTP_CPU_PEERS:
        theirs = figs.get(key)
        if theirs is None or "us_per_request" not in theirs:
            continue
        r = theirs["us_per_request"] / us if us else float("nan")
        rows.append(
            Row(
                label,
                f"{us:.1f} us",
                peer,
                f"{theirs['us_per_request']:.1f} us",
                f"{r:.2f}x",
                **(judged(TARGETS[target], r) if target else {}),
                generator=gen_note(kind, ours.get("generator_cpu"), theirs.get("generator_cpu"))
                + failures(ours, theirs),
            )
        )
    batch = figs.get("syncd_httptools_batch")
    if batch is not None and "us_per_request" in batch:
        rows.append(
            Row(
                f"HTTP {BATCH_OPS}-op batches (httptools): server CPU per op {tag}",
                f"{batch['us_per_request'] / BATCH_OPS:.2f} us",
                generator=gen_note(kind, batch.get("generator_cpu")) + failures(batch),
            )
        )
    return rows


def http_wrk(figs: dict[str, dict[str, Any]]) -> list[Row]:
    """perf.bench.http_wrk: the same ratios and batches, with wrk as the
    generator, and the server's CPU per request against the peers'."""
    kind = f"wrk -t{WRK_THREADS}"
    return http_rows(figs, kind) + http_cpu_rows(figs, kind)


# -- WebSocket --------------------------------------------------------------------------------


def ws_ingest(r: dict[str, Any]) -> list[Row]:
    return [
        Row(
            f"WS ingest: acked durable ops/s (1 connection, {r['window']} in flight, fsync batch)",
            rate(r["ops_per_s"]),
            **judged(TARGETS["ws-ingest.ops"], r["ops_per_s"]),
            generator=gen_note("client", r["client_cpu"]) + f"; server {r['server_cpu']:.0%}",
        ),
        Row(
            "WS ingest: server CPU per acked op",
            f"{r['server_cpu'] / r['ops_per_s'] * 1e6:.1f} us" if r["ops_per_s"] else "no ops",
            generator=gen_note("client", r["client_cpu"]),
        ),
    ]


def ws_fanout(r: dict[str, Any]) -> list[Row]:
    subscribers = r["subscribers"]
    offered = r["rate"] * subscribers
    note = gen_note("subscribers", r["subscriber_cpu"]) + f"; server {r['server_cpu']:.0%}"
    p99 = r["p99_ms"]
    latency = TARGETS["ws-fanout.p99"]
    return [
        Row(
            f"WS fan-out to {subscribers} subscribers: deliveries/s"
            f" ({offered:,.0f}/s offered, {r['resyncs']} resyncs)",
            rate(r["deliveries_per_s"]),
            **judged(TARGETS["ws-fanout.deliveries"], r["deliveries_per_s"]),
            generator=note,
        ),
        Row(
            f"WS fan-out to {subscribers} subscribers: delivery p99",
            f"{p99:.1f} ms" if p99 is not None else "no deliveries",
            target=str(latency),
            met=met(p99 is not None and latency.met(p99)),
            generator=note,
        ),
    ]


def ws_idle(r: dict[str, Any]) -> list[Row]:
    kib = r["per_conn"] / 1024
    return [
        Row(
            f"WS idle: server RSS per connection ({r['connections']:,}, one CRDT each)",
            f"{kib:.1f} KiB",
            **judged(TARGETS["ws-idle.per-connection"], kib),
            generator="n/a (idle)",
        )
    ]


# -- the rga type ----------------------------------------------------------------------------


def rga(r: dict[str, Any]) -> list[Row]:
    """perf.bench.rga_peers: each trace against list splicing and pycrdt; final documents."""
    rows: list[Row] = []
    note = "in-process (no generator)"
    replay, document = TARGETS["rga.replay/list"], TARGETS["rga.document"]

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
                str(replay),
                met(replay.met(ratio) and s["rga_ok"]),
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
        judge = m["final_length"] >= RGA_DOCUMENT_CHARS
        rows.append(
            Row(
                f"RGA final document, {name} x{m['copies']} ({m['final_length']:,} chars)",
                f"{m['final_mb']:.1f} MB (peak {m['peak_mb']:.1f})",
                **(
                    judged(document, m["final_mb"])
                    if judge
                    else {"target": f"n/a (< {RGA_DOCUMENT_CHARS // 1000}k chars)"}
                ),
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


# -- the store --------------------------------------------------------------------------------


def durability(r: dict[str, Any]) -> list[Row]:
    batch, never = r["batch"], r["never"]
    ratio = r["ratio"] or 0.0
    rows = [
        Row(
            f"Durability: {r['writers']} HTTP writers, increments, fsync=batch",
            rate(batch["rps"]),
            "same, fsync=never",
            rate(never["rps"]),
            f"{ratio:.2f}x",
            **judged(TARGETS["durability.batch/never"], ratio),
            generator=gen_note("loadgen", batch["generator_cpu"], never["generator_cpu"])
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


def restart(r: dict[str, Any]) -> list[Row]:
    size = f"{r['ops']:,} ops / {r['crdts']:,} CRDTs"
    rows = []
    for key, label in (("without_snapshot", "log only"), ("with_snapshot", "snapshot")):
        s = r[key]
        rows.append(
            Row(
                f"Restart to ready, {size}, {label}",
                f"{s['seconds']:.2f} s (RSS {s['rss_mb']:.0f} MB)",
                **judged(TARGETS["restart.ready"], s["seconds"]),
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


def pg(r: dict[str, Any]) -> list[Row]:
    """perf.bench.pg_store: one node against the embedded log, three nodes, cross-node latency."""
    rows: list[Row] = []
    for label in ("spread", "hot"):
        emb, pgfig = r.get(f"{label}: embedded log (fsync=batch)"), r.get(f"{label}: PostgreSQL")
        if emb and pgfig:
            ratio = pgfig["ops_per_s"] / emb["ops_per_s"]
            rows.append(
                Row(
                    f"PostgreSQL store: increments/s, one node, {label}",
                    f"{rate(pgfig['ops_per_s'])} (p99 {pgfig['p99_ms']:.1f} ms)",
                    "embedded log, fsync=batch",
                    f"{rate(emb['ops_per_s'])} (p99 {emb['p99_ms']:.1f} ms)",
                    f"{ratio:.2f}x",
                    **judged(TARGETS[f"pg.{label}/embedded"], ratio),
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
                **judged(TARGETS["pg.three-nodes/one"], ratio),
                generator="asyncio client (in the child)",
            )
        )
    cross = TARGETS["pg.cross-node-under-load"]
    for name, fig in r.items():
        if "->B" in name:
            under_load = name.startswith("under load")
            rows.append(
                Row(
                    f"Cross-node latency, {name}",
                    f"p50 {fig['p50_ms']:.1f} ms, p99 {fig['p99_ms']:.1f} ms",
                    **(judged(cross, fig["p99_ms"]) if under_load else {}),
                    generator="half of peak load on A" if under_load else "one op at a time",
                )
            )
    return rows


# -- auth ---------------------------------------------------------------------------------------


def auth(r: dict[str, Any]) -> list[Row]:
    return [
        Row(
            "Auth per request, warm token cache (authenticate + check_write)",
            f"{r['warm_us']:.2f} us",
            **judged(TARGETS["auth.warm"], r["warm_us"]),
            generator="in-process (no generator)",
        ),
        Row(
            "Auth per request, cold (ed25519 verify each time)",
            f"{r['cold_us']:.1f} us",
            generator="in-process (no generator)",
        ),
    ]


ADAPTERS: dict[str, Adapter] = {
    "http": http,
    "http-wrk": http_wrk,
    "ws-ingest": ws_ingest,
    "ws-fanout": ws_fanout,
    "ws-idle": ws_idle,
    "rga": rga,
    "durability": durability,
    "restart": restart,
    "pg": pg,
    "auth": auth,
}
"""One per benchmark of perf.suite.registry.BENCHMARKS, under its name."""
