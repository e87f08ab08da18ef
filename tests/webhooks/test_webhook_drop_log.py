"""A burst of events finding the webhook queue full is logged as a count of
all of them, not as its first drop only (docs/webhooks.md#delivery: dropped
events are counted so they can be alerted on; the log says as much as the
metric). A real server, a receiver that never answers, and batches of ops
whose events overflow the queue of 1024 at once."""

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

DROP_LINE = re.compile(r"webhooks: (\d+) events? dropped \(queue of \d+ full\)")
SHUTDOWN_LINE = re.compile(r"webhooks: (\d+) events? not delivered at shutdown")


def logged(caplog: pytest.LogCaptureFixture, pattern: re.Pattern[str]) -> list[int]:
    return [
        int(m.group(1))
        for r in caplog.records
        if r.name == "syncd.webhooks" and (m := pattern.search(r.getMessage()))
    ]


async def overflow(client: httpx.AsyncClient, receiver: Receiver) -> None:
    """1200 events at once: the receiver holds four, the queue 1024, the rest are dropped."""
    h = await issue(client, client_id=3)
    for n in (1000, 200):
        batch = [{"op": "increment", "amount": 1}] * n
        r = await op(client, h, "gc:burst", batch)
        assert r.status_code == 200, r.text
    await receiver.wait_for(4)


async def test_a_burst_of_drops_is_logged_in_full_by_the_shutdown(
    make_server: Any, make_receiver: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="syncd.webhooks")
    receiver: Receiver = await make_receiver(stall=True)
    srv = await make_server(webhook_url=receiver.url, webhook_drain_s=0.1)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        await overflow(client, receiver)
    dropped = sample(srv.app.metrics, "service_webhook_dropped_total")
    assert dropped > 100
    await srv.server.shutdown()
    # Every event the queue refused is in a line, once; the shutdown's line
    # counts the 1024 still queued and the 4 held by the stalled receiver.
    assert sum(logged(caplog, DROP_LINE)) == dropped
    assert logged(caplog, SHUTDOWN_LINE) == [1024 + 4]


async def test_a_burst_of_drops_is_logged_in_full_once_the_interval_ends(
    make_server: Any,
    make_receiver: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No further drop needed to see the rest of a burst: at most two lines
    per interval, the first drop's at once, the others' at its end."""
    monkeypatch.setattr(dispatcher, "DROP_LOG_INTERVAL", 0.3)
    caplog.set_level(logging.INFO, logger="syncd.webhooks")
    receiver: Receiver = await make_receiver(stall=True)
    srv = await make_server(webhook_url=receiver.url, webhook_drain_s=0.1)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        await overflow(client, receiver)
        dropped = sample(srv.app.metrics, "service_webhook_dropped_total")
        assert dropped > 100
        async with asyncio.timeout(2):
            while sum(logged(caplog, DROP_LINE)) < dropped:
                await asyncio.sleep(0.05)
        lines = logged(caplog, DROP_LINE)
        assert lines[0] == 1 and sum(lines) == dropped and len(lines) == 2
