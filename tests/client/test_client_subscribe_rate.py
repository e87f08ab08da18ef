"""``subscribe`` over the token's rate limit: the server refuses each subscribe
past the limit (``rate_limited`` with ``retry_after``) and the client sends it
again on the same socket once that has passed, rather than reconnecting,
which would send every subscribe at once again: with more ids than the limit
allows in a second, for ever."""

from __future__ import annotations

import asyncio

from syncd.auth.issue import issue_token
from syncd.client import AsyncClient
from tests.client.conftest import HOUR_MS, KEY, NS, now_ms
from tests.conftest import RunningServer

WAIT_S = 10.0
"""Upper bound: a few retry_after seconds, with room to spare."""


def limited_token(rate_limit: int) -> str:
    """A token that may read and write everything, at ``rate_limit`` requests a second."""
    everything = [{"p": "*"}]
    return issue_token(
        KEY,
        namespace=NS,
        client_id=5,
        ttl_ms=HOUR_MS,
        rules={"r": everything, "w": everything, "rl": rate_limit},
        now_ms=now_ms(),
    )


async def test_subscribes_over_the_limit_are_sent_again_on_the_same_socket(
    server: RunningServer,
) -> None:
    ids = [f"gc:rl{i}" for i in range(5)]
    # The upgrade and two subscribes fit in the first second; the other
    # three are refused, then let in as the window moves on.
    async with (
        AsyncClient(server.url, limited_token(3), NS) as client,
        client.subscribe(ids) as subscription,
    ):
        snapshots: set[str] = set()
        async with asyncio.timeout(WAIT_S):
            async for delta in subscription:
                assert delta["kind"] == "snapshot", delta
                snapshots.add(delta["id"])
                if snapshots == set(ids):
                    break
        assert subscription.connects == 1
