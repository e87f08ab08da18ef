"""Events dropped after their retries ran out were logged one line each
("webhooks: event <id> dropped after 4 attempts to ..."): a receiver that
fails every request flooded the log with a line per event. They are counted
as the queue's drops are (de2473d): the first of an interval at once, the
others of the interval in one line at its end, and close() logs those
pending. A real server and a receiver answering 500 to everything."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import httpx
import pytest

from syncd.webhooks import dispatcher
from tests.http.support import issue, op
from tests.webhooks.webhook_receiver import Receiver, sample

FAILED_LINE = re.compile(
    r"webhooks: (\d+) events? dropped after 4 attempts each to http://127\.0\.0\.1:\d+"
    r" \(the last: status 500\)"
)
PER_EVENT_LINE = re.compile(r"webhooks: event \S+ dropped")
EVENTS = 4
"""One per worker: they fail together, after one round of retries."""


def logged(caplog: pytest.LogCaptureFixture, pattern: re.Pattern[str]) -> list[int]:
    return [
        int(m.group(1)) if m.groups() else 1
        for r in caplog.records
        if r.name == "syncd.webhooks"
        and r.levelno >= logging.INFO
        and (m := pattern.search(r.getMessage()))
    ]


async def fail_every_event(make_server: Any, make_receiver: Any, **settings: Any) -> Any:
    receiver: Receiver = await make_receiver(fail_first=10**9, fail_status=500)
    srv = await make_server(webhook_url=receiver.url, **settings)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        h = await issue(client, client_id=3)
        r = await op(client, h, "gc:failing", [{"op": "increment", "amount": 1}] * EVENTS)
        assert r.status_code == 200, r.text
    await receiver.wait_for(EVENTS * 4)  # every attempt of every event
    return srv


async def test_events_failed_in_a_burst_are_logged_as_counts(
    make_server: Any,
    make_receiver: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dispatcher, "DROP_LOG_INTERVAL", 0.3)
    caplog.set_level(logging.INFO, logger="syncd.webhooks")
    srv = await fail_every_event(make_server, make_receiver)
    metrics = srv.app.metrics
    async with asyncio.timeout(5):
        while sample(metrics, "service_webhook_deliveries_total", result="failed") < EVENTS:
            await asyncio.sleep(0.05)
        while sum(logged(caplog, FAILED_LINE)) < EVENTS:
            await asyncio.sleep(0.05)
    assert logged(caplog, PER_EVENT_LINE) == []
    lines = logged(caplog, FAILED_LINE)
    assert lines[0] == 1 and sum(lines) == EVENTS and len(lines) == 2, lines


async def test_failed_events_not_logged_yet_are_logged_at_shutdown(
    make_server: Any, make_receiver: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="syncd.webhooks")
    srv = await fail_every_event(make_server, make_receiver, webhook_drain_s=1.0)
    metrics = srv.app.metrics
    async with asyncio.timeout(5):
        while sample(metrics, "service_webhook_deliveries_total", result="failed") < EVENTS:
            await asyncio.sleep(0.05)
    await srv.server.shutdown()
    assert logged(caplog, PER_EVENT_LINE) == []
    assert sum(logged(caplog, FAILED_LINE)) == EVENTS
