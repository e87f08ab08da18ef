"""The shutdown's line for events left undelivered said "1 events": it counts
in the singular for one, as the drop lines do (a real server, one event held
by a receiver that never answers)."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from tests.http.support import issue, op
from tests.webhooks.webhook_receiver import Receiver


async def test_one_event_left_at_shutdown_is_one_event(
    make_server: Any, make_receiver: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="syncd.webhooks")
    receiver: Receiver = await make_receiver(stall=True)
    srv = await make_server(webhook_url=receiver.url, webhook_drain_s=0.1)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        h = await issue(client)
        r = await op(client, h, "gc:one", {"op": "increment", "amount": 1})
        assert r.status_code == 200, r.text
    await receiver.wait_for(1)
    await srv.server.shutdown()
    lines = [r.getMessage() for r in caplog.records if "at shutdown" in r.getMessage()]
    assert lines == ["webhooks: 1 event not delivered at shutdown"]
