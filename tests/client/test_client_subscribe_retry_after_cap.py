"""A subscribe refused ``rate_limited`` is sent again after the message's
``retry_after``, capped at ``RETRY_AFTER_MAX_S`` like every other wait the
client takes from the service: a longer ``retry_after`` waits the cap, not a
second (which knocked again long before the service said it would take it).

Unit level: the server's rate window is one second, so it never sends a
``retry_after`` over the cap; the message is handed to the subscription as
its socket would."""

from __future__ import annotations

import asyncio

import pytest

from syncd.client import AsyncClient
from syncd.client.retry import RETRY_AFTER_MAX_S
from tests.client.conftest import NS, make_token

CRDT_ID = "gc:limited"
SLACK_S = 0.5
"""Loop time between handing the message over and reading its due time."""


async def wait_after_refusal(retry_after: object) -> float:
    """Seconds until the refused subscribe is due again."""
    async with AsyncClient("http://127.0.0.1:9", make_token(), NS) as client:
        subscription = client.subscribe([CRDT_ID])
        message = {"kind": "error", "id": CRDT_ID, "error": "rate_limited", "message": "slow down"}
        if retry_after is not None:
            message["retry_after"] = retry_after
        await subscription._handle(message)
        return subscription._later[CRDT_ID] - asyncio.get_running_loop().time()


@pytest.mark.parametrize(
    ("retry_after", "expected_s"),
    [
        (30, RETRY_AFTER_MAX_S),
        (3600, RETRY_AFTER_MAX_S),
        (RETRY_AFTER_MAX_S + 0.5, RETRY_AFTER_MAX_S),
        (3, 3.0),
        (RETRY_AFTER_MAX_S, RETRY_AFTER_MAX_S),
        (None, 1.0),
        (0, 1.0),
        (-5, 1.0),
        ("30", 1.0),
        (float("inf"), RETRY_AFTER_MAX_S),
        (float("nan"), 1.0),
    ],
)
async def test_a_refused_subscribe_waits_retry_after_up_to_the_cap(
    retry_after: object, expected_s: float
) -> None:
    wait = await wait_after_refusal(retry_after)
    assert expected_s - SLACK_S <= wait <= expected_s, (retry_after, wait)
