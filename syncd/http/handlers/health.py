"""Health and metrics: no authentication (docs/http-api.md#health-and-metrics).

Readiness is whether storage takes writes. On a cluster node its body also
says how the replication stream is (``wal_stream``: ``off`` without
SERVICE_WAL_CONNSTR, ``connecting`` or ``streaming``), which does not change
the status: the node takes writes either way.

From the moment a shutdown starts (SIGTERM), readiness answers 503
``draining`` whatever the storage: the node is on its way out, and a load
balancer should send new work elsewhere while it still serves
(SERVICE_SHUTDOWN_DRAIN_S). Liveness stays 200 until the process exits."""

from __future__ import annotations

from collections.abc import Callable

from syncd.http.request import Request
from syncd.http.response import Response, json_response
from syncd.http.router import Router
from syncd.metrics import Metrics

PROMETHEUS_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
_LIVE = b'{"status":"live"}'


def register(
    router: Router,
    *,
    ready: Callable[[], bool],
    wal_last_seq: Callable[[], int],
    metrics: Metrics,
    stopping: Callable[[], bool],
    wal_stream: Callable[[], str] | None = None,
) -> None:

    def live(_: Request) -> Response:
        return Response(200, _LIVE)

    def readiness(_: Request) -> Response:
        if stopping():
            status, code = "draining", 503
        elif ready():
            status, code = "ready", 200
        else:
            status, code = "unavailable", 503
        body: dict[str, object] = {"status": status, "wal_last_seq": wal_last_seq()}
        if wal_stream is not None:
            body["wal_stream"] = wal_stream()
        return json_response(body, code)

    def exposition(_: Request) -> Response:
        return Response(200, metrics.render(), PROMETHEUS_TYPE)

    router.add("GET", "/health/live", live)
    router.add("GET", "/health/ready", readiness)
    router.add("GET", "/metrics", exposition)
