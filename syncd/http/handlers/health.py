"""Health and metrics: no authentication (docs/http-api.md#health-and-metrics)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from syncd.http.request import Request
from syncd.http.response import Response, json_response

if TYPE_CHECKING:
    from syncd.app import App

PROMETHEUS_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
_LIVE = b'{"status":"live"}'


def register(app: App) -> None:
    router = app.router

    def live(_: Request) -> Response:
        return Response(200, _LIVE)

    def ready(_: Request) -> Response:
        ok = app.ready
        body = {"status": "ready" if ok else "unavailable", "wal_last_seq": app.wal_last_seq}
        return json_response(body, 200 if ok else 503)

    def metrics(_: Request) -> Response:
        return Response(200, app.metrics.render(), PROMETHEUS_TYPE)

    router.add("GET", "/health/live", live)
    router.add("GET", "/health/ready", ready)
    router.add("GET", "/metrics", metrics)
