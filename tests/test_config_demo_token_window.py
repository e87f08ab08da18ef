"""SERVICE_DEMO_TOKEN_WINDOW_MS: the window of the demo's per-address token
limit. A minute by default; a whole second at least (Retry-After counts
whole seconds), a day at most; the server counts tokens in it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from syncd.config import DEFAULT_DEMO_TOKEN_WINDOW_MS, ConfigError, from_env
from syncd.http.handlers.demo import DEMO_TOKEN_WINDOW_MS, DEMO_TOKENS_PER_WINDOW

WAIT_BOUND_S = 30.0
"""How long the test asks again for a token after its window: a bound, not a sleep."""


def test_the_default_is_the_demo_window() -> None:
    assert from_env({}).demo_token_window_ms == DEFAULT_DEMO_TOKEN_WINDOW_MS == DEMO_TOKEN_WINDOW_MS
    assert from_env({"SERVICE_DEMO_TOKEN_WINDOW_MS": "5000"}).demo_token_window_ms == 5000


@pytest.mark.parametrize("value", ["0", "999", "-1", "86400001", "1.5", "minute"])
def test_a_window_out_of_range_or_not_an_integer_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="SERVICE_DEMO_TOKEN_WINDOW_MS"):
        from_env({"SERVICE_DEMO_TOKEN_WINDOW_MS": value})


async def test_the_server_counts_demo_tokens_in_the_set_window(make_server: Any) -> None:
    srv = await make_server(demo=True, demo_token_window_ms=1000)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        for _ in range(DEMO_TOKENS_PER_WINDOW):
            assert (await client.get("/demo/token")).status_code == 200
        refused = await client.get("/demo/token")
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        deadline = time.monotonic() + WAIT_BOUND_S
        while (answer := await client.get("/demo/token")).status_code == 429:
            assert time.monotonic() < deadline, "no token after a one-second window"
            # As a client does: Retry-After, then again.
            await asyncio.sleep(int(answer.headers["retry-after"]))
        assert answer.status_code == 200
