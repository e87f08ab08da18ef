"""Prometheus metrics: the seed's five, the webhook ones, and process metrics.

Each application instance owns its registry, so several servers can run in one
process (tests) without clashing. Label children are cached by the callers that
hit them per op (``labels()`` look-ups are not free on the hot path).
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

MERGE_BUCKETS = (
    0.00001,
    0.000025,
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.05,
    0.1,
)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        self.ops_total = Counter(
            "service_ops_total", "CRDT operations applied", ["ns", "crdt_id", "op_type"], registry=r
        )
        self.ws_connections_active = Gauge(
            "service_ws_connections_active", "Active WebSocket connections", registry=r
        )
        self.wal_entries_total = Counter(
            "service_wal_entries_total", "WAL entries written", registry=r
        )
        self.merge_duration_seconds = Histogram(
            "service_merge_duration_seconds",
            "Merge/apply latency",
            ["ns"],
            buckets=MERGE_BUCKETS,
            registry=r,
        )
        self.subscriptions_active = Gauge(
            "service_subscriptions_active", "Active WebSocket subscription receivers", registry=r
        )
        self.webhook_deliveries_total = Counter(
            "service_webhook_deliveries_total",
            "Webhook delivery attempts by result (ok, retry, failed)",
            ["result"],
            registry=r,
        )
        self.webhook_dropped_total = Counter(
            "service_webhook_dropped_total",
            "Webhook events dropped (queue full or retries spent)",
            registry=r,
        )
        self.webhook_queue_depth = Gauge(
            "service_webhook_queue_depth", "Webhook events waiting for delivery", registry=r
        )
        self.http_requests_total = Counter(
            "service_http_requests_total", "HTTP requests answered", ["status"], registry=r
        )
        self.sse_connections_active = Gauge(
            "service_sse_connections_active", "Active SSE streams", registry=r
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
