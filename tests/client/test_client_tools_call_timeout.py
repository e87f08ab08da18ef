"""Agent tools bound each call's time (``call_timeout_s``): a call the
service keeps waiting (a stalled link, or retries that honour long
Retry-After answers) is stopped at the limit and answered with a ``timeout``
tool error that says whether anything may have changed and when to try
again; it held a model's turn for 40 s and more (four attempts of up to
10 s each). Against the real server."""

from __future__ import annotations

import time
from typing import Any

import pytest

from syncd.client import AgentTools, AsyncClient
from syncd.client.tools import DEFAULT_CALL_TIMEOUT_S
from tests.client.conftest import NS, make_token
from tests.client.stalling_proxy import proxy_to
from tests.conftest import RunningServer

LIMIT_S = 1.0
"""The call limit the tests set: long enough for a normal call on a loaded
machine, short enough to wait out."""

SLACK_S = 1.0
"""How long after the limit the answer may come (scheduling on a loaded machine)."""


async def _timed(tools: AgentTools, name: str, arguments: dict[str, Any]) -> tuple[Any, float]:
    started = time.monotonic()
    result = await tools.execute(name, arguments)
    return result, time.monotonic() - started


async def test_a_stalled_call_is_answered_at_the_limit(server: RunningServer) -> None:
    async with proxy_to(server) as proxy:
        url = f"http://127.0.0.1:{proxy.port}"
        async with AsyncClient(url, make_token(3), NS) as client:
            # The calls expected to succeed get the default limit: a loaded
            # machine may take a while over them.
            patient = AgentTools(client, [("hits", "gcounter")])
            tools = AgentTools(client, [("hits", "gcounter")], call_timeout_s=LIMIT_S)
            assert (await patient.execute("service_increment_hits", {}))["value"] == 1
            proxy.stall()
            read, took = await _timed(tools, "service_read_hits", {})
            assert LIMIT_S <= took < LIMIT_S + SLACK_S, took
            assert read["ok"] is False and read["error"] == "timeout", read
            assert f"{LIMIT_S:g} s" in read["message"] and "nothing was changed" in read["message"]
            assert read["retry_after_s"] > 0
            write, took = await _timed(tools, "service_increment_hits", {"amount": 2})
            assert LIMIT_S <= took < LIMIT_S + SLACK_S, took
            assert write["error"] == "timeout", write
            # An op may have been applied: the model is told to look before redoing it.
            assert "may have been applied" in write["message"], write
            proxy.resume()
            # The client is still usable once the service answers again.
            again = await patient.execute("service_read_hits", {})
            assert again["ok"] is True and again["value"] in (1, 3), again


async def test_retries_under_rate_limiting_stop_at_the_limit(make_server: Any) -> None:
    server = await make_server(rate_limit=1)
    async with AsyncClient(server.url, make_token(3), NS) as client:
        tools = AgentTools(client, [("hits", "gcounter")], call_timeout_s=LIMIT_S)
        results = []
        started = time.monotonic()
        for _ in range(3):  # the second and third wait on Retry-After
            result, took = await _timed(tools, "service_increment_hits", {})
            assert took < LIMIT_S + SLACK_S, (took, result)
            results.append(result)
        assert time.monotonic() - started < 3 * (LIMIT_S + SLACK_S)
    assert any(result.get("error") == "timeout" for result in results), results


def test_the_limit_is_checked() -> None:
    assert DEFAULT_CALL_TIMEOUT_S > 0
    for bad in (0, -1.0, float("nan"), float("inf"), "5", True):
        with pytest.raises(ValueError, match="call_timeout_s"):
            AgentTools(None, [("hits", "gcounter")], call_timeout_s=bad)  # type: ignore[arg-type]
