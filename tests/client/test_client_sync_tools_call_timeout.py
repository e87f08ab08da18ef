"""The blocking agent tools (``SyncAgentTools``) bound each call's time as
the async ones do (``call_timeout_s``): a stalled link, or retries that
honour long Retry-After answers, held a call (and a model's turn) 40 s and
more. A blocking call cannot be cancelled, so each request's timeout is cut
to the time left and no retry waits past it. Against the real server."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from syncd.client import Client, SyncAgentTools
from tests.client.conftest import NS, make_token
from tests.client.stalling_proxy import proxy_to
from tests.conftest import RunningServer

LIMIT_S = 1.0
"""The call limit the tests set: long enough for a normal call on a loaded
machine, short enough to wait out."""

SLACK_S = 1.0
"""How long after the limit the answer may come (scheduling on a loaded machine)."""


def _timed(tools: SyncAgentTools, name: str, arguments: dict[str, Any]) -> tuple[Any, float]:
    started = time.monotonic()
    result = tools.execute(name, arguments)
    return result, time.monotonic() - started


async def test_a_stalled_call_is_answered_at_the_limit(server: RunningServer) -> None:
    async with proxy_to(server) as proxy:
        url = f"http://127.0.0.1:{proxy.port}"

        def run() -> None:
            with Client(url, make_token(3), NS) as client:
                patient = SyncAgentTools(client, [("hits", "gcounter")])
                tools = SyncAgentTools(client, [("hits", "gcounter")], call_timeout_s=LIMIT_S)
                assert patient.execute("service_increment_hits", {})["value"] == 1
                proxy_stall()
                read, took = _timed(tools, "service_read_hits", {})
                assert LIMIT_S - 0.05 <= took < LIMIT_S + SLACK_S, took
                assert read["ok"] is False and read["error"] == "timeout", read
                assert "nothing was changed" in read["message"] and read["retry_after_s"] > 0
                write, took = _timed(tools, "service_increment_hits", {"amount": 2})
                assert took < LIMIT_S + SLACK_S, took
                assert write["error"] == "timeout", write
                assert "may have been applied" in write["message"], write
                for name, arguments in (
                    ("service_history_hits", {"at": 1}),
                    ("service_history_hits", {}),
                ):
                    result, took = _timed(tools, name, arguments)
                    assert took < LIMIT_S + SLACK_S, (name, took)
                    assert result["error"] == "timeout", (name, result)
                proxy_resume()
                again = patient.execute("service_read_hits", {})
                assert again["ok"] is True and again["value"] in (1, 3), again
                # Outside a call, the client has no deadline left behind.
                assert client.fetch("hits")["value"] in (1, 3)

        loop = asyncio.get_running_loop()

        def proxy_stall() -> None:
            asyncio.run_coroutine_threadsafe(_call(proxy.stall), loop).result()

        def proxy_resume() -> None:
            asyncio.run_coroutine_threadsafe(_call(proxy.resume), loop).result()

        await asyncio.to_thread(run)


async def _call(action: Any) -> None:
    action()


async def test_retries_under_rate_limiting_stop_at_the_limit(make_server: Any) -> None:
    server = await make_server(rate_limit=1)

    def run() -> list[Any]:
        with Client(server.url, make_token(3), NS) as client:
            tools = SyncAgentTools(client, [("hits", "gcounter")], call_timeout_s=LIMIT_S)
            results = []
            for _ in range(3):  # the second and third wait on Retry-After
                result, took = _timed(tools, "service_increment_hits", {})
                assert took < LIMIT_S + SLACK_S, (took, result)
                results.append(result)
            return results

    started = time.monotonic()
    results = await asyncio.to_thread(run)
    assert time.monotonic() - started < 3 * (LIMIT_S + SLACK_S)
    assert any(result.get("error") == "timeout" for result in results), results


def test_the_limit_is_checked() -> None:
    for bad in (0, -1.0, float("nan"), float("inf"), "5", True):
        with pytest.raises(ValueError, match="call_timeout_s"):
            SyncAgentTools(None, [("hits", "gcounter")], call_timeout_s=bad)  # type: ignore[arg-type]
