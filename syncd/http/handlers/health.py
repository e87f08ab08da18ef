"""Health and metrics: no authentication (docs/http-api.md#health-and-metrics).

Readiness is whether storage takes writes. On a cluster node its body also
says how the replication stream is (``wal_stream``: ``off`` without
SERVICE_WAL_CONNSTR, ``connecting`` or ``streaming``), which does not change
the status: the node takes writes either way."""

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
    wal_stream: Callable[[], str] | None = None,
) -> None:

    def live(_: Request) -> Response:
        return Response(200, _LIVE)

    def readiness(_: Request) -> Response:
        ok = ready()
        body: dict[str, object] = {
            "status": "ready" if ok else "unavailable",
            "wal_last_seq": wal_last_seq(),
        }
        if wal_stream is not None:
            body["wal_stream"] = wal_stream()
        return json_response(body, 200 if ok else 503)

    def exposition(_: Request) -> Response:
        return Response(200, metrics.render(), PROMETHEUS_TYPE)

    router.add("GET", "/health/live", live)
    router.add("GET", "/health/ready", readiness)
    router.add("GET", "/metrics", exposition)
