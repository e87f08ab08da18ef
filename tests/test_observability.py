"""What an operator reads: request and commit latency histograms, build info
and the configured limits in /metrics, and the opt-in access log."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import platform
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from prometheus_client.parser import text_string_to_metric_families

from syncd import __version__
from syncd.http.access import REDACTED, redact_query
from syncd.http.router import UNMATCHED, route_class
from syncd.metrics import COMMIT_BUCKETS, REQUEST_BUCKETS, Metrics
from tests.conftest import RunningServer
from tests.http.support import issue, op

ROUTE_CLASSES = {
    "ops",
    "read",
    "list",
    "delete",
    "events",
    "websocket",
    "yjs",
    "history",
    "restore",
    "revert",
    "tokens",
    "admin",
    "health",
    "metrics",
    "openapi",
    "demo",
    "cors",
}
"""The classes docs/operations.md lists."""


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def count(got: dict[Any, float], route: str, status: str) -> float:
    key = ("service_http_request_duration_seconds_count", (("route", route), ("status", status)))
    return got.get(key, 0)


def test_the_request_histogram_has_prometheus_buckets_by_route_and_status_class() -> None:
    m = Metrics()
    m.http_request("ops", 200, REQUEST_BUCKETS[0])
    m.http_request("ops", 201, 0.2)
    m.http_request("read", 404, 100.0)
    m.store_commit(COMMIT_BUCKETS[0] / 2)
    text = m.render().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["service_http_request_duration_seconds"].type == "histogram"
    assert families["service_store_commit_seconds"].type == "histogram"
    got = samples(text)
    bucket = "service_http_request_duration_seconds_bucket"
    ops_2xx = (("route", "ops"), ("status", "2xx"))
    assert got[(bucket, (("le", "0.0005"), *ops_2xx))] == 1
    assert got[(bucket, (("le", "0.25"), *ops_2xx))] == 2
    assert count(got, "ops", "2xx") == 2 and count(got, "read", "4xx") == 1
    assert got[(bucket, (("le", "10.0"), ("route", "read"), ("status", "4xx")))] == 0
    assert got[(bucket, (("le", "+Inf"), ("route", "read"), ("status", "4xx")))] == 1
    assert got[("service_store_commit_seconds_bucket", (("le", "0.0001"),))] == 1
    assert got[("service_store_commit_seconds_count", ())] == 1
    assert ("service_http_request_duration_seconds_created", ops_2xx) in got


def test_every_route_has_a_class_of_the_documented_few(tmp_path: Path) -> None:
    from syncd.app import App
    from syncd.config import Settings

    app = App(Settings(data_dir=tmp_path, demo=True, node_id="t"))
    classes = {route_class(method, pattern) for method, pattern in app.router.routes}
    assert classes <= ROUTE_CLASSES, classes - ROUTE_CLASSES
    assert {"ops", "read", "list", "events", "websocket", "yjs", "tokens"} <= classes
    assert route_class("GET", "/v1/namespaces/{ns}/crdts/{id}") == "read"
    assert route_class("DELETE", "/v1/namespaces/{ns}/crdts/{id}") == "delete"
    assert route_class("OPTIONS", "/v1/namespaces/{ns}/crdts/{id}/ops") == "cors"
    assert UNMATCHED not in ROUTE_CLASSES


async def test_a_real_server_measures_requests_and_commits(make_server: Any) -> None:
    server: RunningServer = await make_server(fsync="batch", max_connections=77)
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        for _ in range(5):
            assert (await op(client, h, "gc:m", {"op": "increment"})).status_code == 200
        await asyncio.gather(*(op(client, h, f"gc:n{i}", {"op": "increment"}) for i in range(20)))
        assert (await client.get("/v1/namespaces/app/crdts/gc:m", headers=h)).status_code == 200
        assert (await client.get("/v1/namespaces/app/crdts/gc:no", headers=h)).status_code == 404
        assert (await client.get("/nowhere")).status_code == 404
        async with client.stream(
            "GET", "/v1/namespaces/app/crdts/gc:m/events", headers=h
        ) as stream:
            assert stream.status_code == 200
        token = h["authorization"].split()[1]
        async with websockets.connect(
            f"ws://127.0.0.1:{server.port}/v1/namespaces/app/ws?token={token}"
        ):
            pass
        got = samples((await client.get("/metrics")).text)
    assert count(got, "ops", "2xx") == 25
    assert count(got, "read", "2xx") == 1 and count(got, "read", "4xx") == 1
    assert count(got, UNMATCHED, "4xx") == 1
    assert count(got, "events", "2xx") == 1 and count(got, "websocket", "1xx") == 1
    assert count(got, "tokens", "2xx") == 1
    total = got[
        ("service_http_request_duration_seconds_sum", (("route", "ops"), ("status", "2xx")))
    ]
    assert 0 < total < 25
    # One observation per durable group commit.
    commits = got[("service_store_commits_total", ())]
    assert got[("service_store_commit_seconds_count", ())] == commits >= 1
    assert 0 < got[("service_store_commit_seconds_sum", ())] < 10
    # What runs, and the limits, for ratios in alerts.
    info = [
        dict(labels)
        for (name, labels), value in got.items()
        if name == "service_build_info" and value == 1
    ]
    assert info == [
        {
            "version": __version__,
            "python": platform.python_version(),
            "http_parser": server.server.parser_name,
            "store": "embedded",
        }
    ]
    assert got[("service_connections_max", ())] == 77
    assert got[("service_connections_open", ())] >= 1
    assert got[("service_engine_memory_budget_bytes", ())] == 512 * 1024 * 1024


def test_token_values_are_redacted_from_queries() -> None:
    assert redact_query("since=3&token=abc.def&epoch=e") == f"since=3&token={REDACTED}&epoch=e"
    assert redact_query("TOKEN=x&%74oken=y") == f"TOKEN={REDACTED}&%74oken={REDACTED}"
    assert redact_query("access_token=z") == f"access_token={REDACTED}"
    assert redact_query("prefix=gc:&limit=2") == "prefix=gc:&limit=2"
    assert redact_query("tokens=1") == "tokens=1"


async def test_the_access_log_is_off_unless_asked_for(
    make_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="syncd.access")
    server: RunningServer = await make_server()
    async with httpx.AsyncClient(base_url=server.url) as client:
        await client.get("/health/live")
    assert [r for r in caplog.records if r.name == "syncd.access"] == []


async def test_the_access_log_has_one_line_per_request_and_never_a_token(
    make_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="syncd.access")
    server: RunningServer = await make_server(
        access_log=True, trusted_proxies=(ipaddress.ip_network("127.0.0.1/32"),)
    )
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        token = h["authorization"].split()[1]
        await op(client, h, "gc:a", {"op": "increment"})
        async with client.stream(
            "GET",
            f"/v1/namespaces/app/crdts/gc:a/events?token={token}",
            headers={"x-forwarded-for": "203.0.113.9"},
        ) as stream:
            assert stream.status_code == 200
        await client.get("/nowhere?token=secret-admin-value")
    lines = [r.getMessage() for r in caplog.records if r.name == "syncd.access"]
    assert len(lines) == 4, lines
    issued, ops, events, missing = lines
    assert issued.startswith("127.0.0.1 POST /v1/namespaces/app/tokens 200 ")
    assert ops.startswith("127.0.0.1 POST /v1/namespaces/app/crdts/gc:a/ops 200 ")
    assert events.startswith(
        f"203.0.113.9 GET /v1/namespaces/app/crdts/gc:a/events?token={REDACTED} 200 "
    )
    assert missing.startswith(f"127.0.0.1 GET /nowhere?token={REDACTED} 404 ")
    for line in lines:
        assert line.endswith("ms") and float(line.split()[-1][:-2]) >= 0
        assert token not in line and "secret-admin-value" not in line
        assert token.split(".")[1] not in line


async def test_request_latency_is_measured_below_a_millisecond(make_server: Any) -> None:
    # uvloop's loop.time() counts whole milliseconds: a read from memory (a
    # tenth of one) was timed 0 or 1 ms, so the histogram's first bucket
    # (0.5 ms) and the access log's tenths of a millisecond meant nothing.
    server: RunningServer = await make_server()
    async with httpx.AsyncClient(base_url=server.url) as client:
        for _ in range(20):
            assert (await client.get("/health/live")).status_code == 200
        got = samples((await client.get("/metrics")).text)
    key = (("route", "health"), ("status", "2xx"))
    assert got[("service_http_request_duration_seconds_count", key)] == 20
    total_ms = got[("service_http_request_duration_seconds_sum", key)] * 1000
    assert 0 < total_ms < 20 * 1000
    assert abs(total_ms - round(total_ms)) > 1e-6, f"{total_ms} ms: whole milliseconds"
