"""The adapters on canned figures: each benchmark's JSON becomes the rows it should,
judged against the registry's targets, without running anything."""

from __future__ import annotations

from typing import Any

from perf.suite import adapters
from perf.suite.report import Row


def fig(rps: float, cpu: float = 0.3, **statuses: int) -> dict[str, Any]:
    return {"rps": rps, "p99_ms": 1.0, "generator_cpu": cpu, "statuses": {"200": 1, **statuses}}


def by_peer(rows: list[Row]) -> dict[tuple[str, str], Row]:
    return {(r.workload, r.peer): r for r in rows}


def test_failures_counts_every_non_200_answer() -> None:
    assert adapters.failures({"statuses": {"200": 10}}, None) == ""
    assert adapters.failures(
        {"statuses": {"200": 5, "429": 3}}, {"non_2xx": 2, "socket_errors": 1}
    ) == ("; 6 errors")


def test_http_ratios_batches_and_p99_at_half_peak() -> None:
    r = {
        "bare h11: GET": fig(10_000),
        "bare h11: POST": fig(5_000),
        "raw uvloop: POST": fig(50_000, cpu=0.95),
        "uvicorn+starlette (h11): increment": fig(4_000),
        "uvicorn+starlette (httptools): increment": fig(6_000),
        "syncd (h11): GET /health/live": fig(9_500),
        "syncd (h11): increment": fig(4_000, **{"503": 4}),
        "syncd (h11): 100-op batch": fig(1_200),
        "syncd (httptools): increment": fig(20_000),
        "syncd (httptools): increment @ half peak": {"p99_ms": 7.5, "generator_cpu": 0.1},
        "raw uvloop: POST @ syncd (httptools) half peak": {"p99_ms": 0.9},
        "syncd (httptools): batched ops/s": 1.0,  # a derived figure, not a run
    }
    rows = adapters.http(r)
    peers = by_peer(rows)
    get = peers[("HTTP GET /health/live (h11) [loadgen]", "bare h11 GET")]
    assert (get.ratio, get.target, get.met) == ("0.95x", ">= 0.90x", "yes")
    inc = peers[("HTTP increment (h11) [loadgen]", "bare h11 POST")]
    assert (inc.ratio, inc.met) == ("0.80x", "NO")
    assert inc.generator == "loadgen 30% / 30%; 4 errors"
    raw = peers[("HTTP increment (httptools) [loadgen]", "raw uvloop POST")]
    assert raw.target == ">= 0.40x" and raw.generator.endswith("SATURATED")
    starlette = peers[("HTTP increment (httptools) [loadgen]", "uvicorn+Starlette (httptools)")]
    assert (starlette.ratio, starlette.target, starlette.met) == ("3.33x", ">= 3.00x", "yes")
    batch = peers[("HTTP 100-op batches (h11), ops/s [loadgen]", "")]
    assert (batch.syncd, batch.met) == ("120,000/s", "yes")
    half = peers[
        ("HTTP increment p99 at half peak (httptools, open loop)", "raw uvloop POST, same rate")
    ]
    assert (half.syncd, half.peer_figure, half.target, half.met) == (
        "7.50 ms",
        "0.90 ms",
        "<= 5 ms",
        "NO",
    )
    # no GET figure for httptools: no row rather than a broken one
    assert ("HTTP GET /health/live (httptools) [loadgen]", "bare h11 GET") not in peers


def test_http_wrk_rows_name_the_generator() -> None:
    rows = adapters.http_wrk({"h11_get": fig(10_000), "syncd_h11_get": fig(12_000)})
    [row] = rows
    assert row.workload == "HTTP GET /health/live (h11) [wrk]"
    assert row.generator == "wrk -t1 30% / 30%" and row.met == "yes"


def test_http_wrk_cpu_rows_judge_syncd_against_the_same_work_peer_and_starlette() -> None:
    def cpu(rps: float, us: float) -> dict[str, Any]:
        return {**fig(rps), "us_per_request": us}

    rows = adapters.http_wrk(
        {
            "syncd_httptools_inc": cpu(20_000, 20.0),
            "samework_httptools": cpu(10_000, 76.0),
            "starlette_httptools": cpu(20_000, 38.0),
            "uvloop_post": cpu(150_000, 6.5),
            "syncd_httptools_batch": cpu(1_000, 650.0),
        }
    )
    cpu_rows = [r for r in rows if "CPU" in r.workload]
    own, samework, starlette, uvloop, batch = cpu_rows
    assert own.workload == "HTTP increment (httptools): server CPU per request [wrk]"
    assert (own.syncd, own.target, own.met) == ("20.0 us", "<= 21 us", "yes")
    assert (samework.peer_figure, samework.ratio, samework.target, samework.met) == (
        "76.0 us",
        "3.80x",
        ">= 3.50x",
        "yes",
    )
    assert (starlette.ratio, starlette.target, starlette.met) == ("1.90x", ">= 2.00x", "NO")
    assert (uvloop.ratio, uvloop.target) == ("0.33x", "")
    assert (batch.workload, batch.syncd) == (
        "HTTP 100-op batches (httptools): server CPU per op [wrk]",
        "6.50 us",
    )
    # Figures without the server's CPU (an older run): no CPU rows.
    assert not [
        r for r in adapters.http_wrk({"syncd_httptools_inc": fig(1)}) if "CPU" in r.workload
    ]


def test_ws_rows() -> None:
    ingest, cpu = adapters.ws_ingest(
        {"window": 1000, "ops_per_s": 16_224, "client_cpu": 0.11, "server_cpu": 0.99}
    )
    assert (ingest.syncd, ingest.target, ingest.met) == ("16,224/s", ">= 20,000/s", "NO")
    assert (cpu.workload, cpu.syncd, cpu.target) == (
        "WS ingest: server CPU per acked op",
        "61.0 us",
        "",
    )
    fanout = {
        "subscribers": 50,
        "rate": 1000,
        "resyncs": 0,
        "deliveries_per_s": 50_000,
        "p99_ms": None,
        "subscriber_cpu": 0.2,
        "server_cpu": 0.5,
    }
    rate, latency = adapters.ws_fanout(fanout)
    assert rate.workload.startswith("WS fan-out to 50 subscribers") and rate.met == "NO"
    assert (latency.syncd, latency.target, latency.met) == ("no deliveries", "<= 50 ms", "NO")
    [idle] = adapters.ws_idle({"per_conn": 5.3 * 1024, "connections": 200})
    assert (idle.syncd, idle.target, idle.met) == ("5.3 KiB", "<= 20 KB", "yes")


def test_rga_rows_judge_only_documents_big_enough() -> None:
    r = {
        "sequential": [
            {
                "trace": "rustcode.json.gz",
                "patches": 1000,
                "rga_s": 0.3,
                "list_s": 0.1,
                "rga_ok": True,
                "list_ok": True,
                "pycrdt_s": None,
            }
        ],
        "memory": [
            {
                "trace": "a.json.gz",
                "copies": 1,
                "final_length": 2000,
                "final_mb": 0.1,
                "peak_mb": 1,
            },
            {
                "trace": "b.json.gz",
                "copies": 9,
                "final_length": 150_000,
                "final_mb": 12,
                "peak_mb": 40,
            },
        ],
        "concurrent": [],
    }
    replay, small, big = adapters.rga(r)
    assert (replay.ratio, replay.target, replay.met) == ("3.00x", "<= 1.50x", "NO")
    assert (small.target, small.met) == ("n/a (< 100k chars)", "")
    assert (big.target, big.met) == ("< 50 MB", "yes")


def test_store_and_auth_rows() -> None:
    [durable, log] = adapters.durability(
        {"writers": 8, "batch": fig(800), "never": fig(1000), "ratio": 0.8, "log_bytes_per_op": 61}
    )
    assert (durable.ratio, durable.met) == ("0.80x", "yes") and log.syncd == "61 B"
    fast = {"seconds": 1.5, "rss_mb": 80}
    rows = adapters.restart(
        {
            "ops": 20_000,
            "crdts": 200,
            "log_bytes_per_op": 40,
            "without_snapshot": fast,
            "with_snapshot": {"seconds": 6.0, "rss_mb": 90},
        }
    )
    assert [r.met for r in rows] == ["yes", "NO", ""]
    pg = adapters.pg(
        {
            "hot: embedded log (fsync=batch)": {"ops_per_s": 1000, "p99_ms": 2},
            "hot: PostgreSQL": {"ops_per_s": 600, "p99_ms": 4},
            "under load: small delta write->B": {"p50_ms": 2, "p99_ms": 12},
            "one op: small delta write->B": {"p50_ms": 1, "p99_ms": 3},
        }
    )
    assert [(r.target, r.met) for r in pg] == [
        (">= 0.50x", "yes"),
        ("p99 <= 10 ms", "NO"),
        ("", ""),
    ]
    warm, cold = adapters.auth({"warm_us": 2.5, "cold_us": 80.0})
    assert (warm.target, warm.met, cold.target) == ("<= 5 us", "yes", "")
