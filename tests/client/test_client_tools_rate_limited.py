"""Agent tools: a 429 from the service comes back to the model with how
long to wait (``retry_after_s``, from ``Retry-After``) and a message saying
so; "too many requests" alone leaves a model to retry at once, and be
refused again. Against the real server, its rate limit set low."""

from __future__ import annotations

from typing import Any

from syncd.client import AgentTools, AsyncClient
from tests.client.conftest import NS, make_token

RATE_LIMIT = 1
"""Requests a second the server takes: the second read in a row is refused."""

READS = 10
"""Reads sent back to back; far more than the rate limit lets through."""


async def test_a_rate_limited_call_says_when_to_try_again(make_server: Any) -> None:
    server = await make_server(rate_limit=RATE_LIMIT)
    async with AsyncClient(server.url, make_token(3), NS) as client:
        tools = AgentTools(client, [("hits", "gcounter")])
        results = [await tools.execute("service_read_hits", {}) for _ in range(READS)]
    limited = [result for result in results if result.get("error") == "rate_limited"]
    assert limited, results
    for result in limited:
        assert result["ok"] is False
        wait = result["retry_after_s"]
        assert isinstance(wait, int | float) and wait > 0, result
        assert f"{wait:g} s" in result["message"], result
