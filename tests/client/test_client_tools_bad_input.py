"""Agent tools given what a model may send: NaN and Infinity (Python's json
reads them), input nested past the recursion limit, a client id of the wrong
type. Each must come back as an ``invalid_input`` result (docs/python-client.md:
``execute`` never raises), against the real server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from syncd.client import AgentTools, AsyncClient, Client, SyncAgentTools
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

CRDTS = [("hits", "gcounter"), ("title", "lwwregister"), ("cart", "orset")]

DEEP: Any = []
for _ in range(5000):
    DEEP = [DEEP]

BAD: list[tuple[str, Any]] = [
    ("service_set_title", '{"value": NaN}'),
    ("service_set_title", {"value": float("inf")}),
    ("service_set_title", {"value": {"x": [float("nan")]}}),
    ("service_add_cart", '{"element": -Infinity}'),
    ("service_add_cart", {"element": DEEP}),
    ("service_set_title", {"value": DEEP}),
    ("service_increment_hits", "[" * 100_000),
    ("service_set_title", '{"value": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    ("service_set_title", {"value": 1, "client_id": "3"}),
    ("service_set_title", {"value": 1, "client_id": True}),
    ("service_set_title", {"value": 1, "client_id": -1}),
    ("service_set_title", {"value": 1, "client_id": {"id": 3}}),
]


def _check(name: str, arguments: Any, result: Any) -> None:
    assert result["ok"] is False and result["error"] == "invalid_input", (name, result)
    assert isinstance(result["message"], str) and result["message"]
    json.dumps(result)


async def test_bad_values_come_back_as_invalid_input(server: RunningServer) -> None:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        tools = AgentTools(client, CRDTS)
        for name, arguments in BAD:
            _check(name, arguments, await tools.execute(name, arguments))
        # Nothing was written, and the tools still work.
        assert await client.read("title") is None and await client.read("cart") is None
        # A whole float client id is the integer (as for amount and seq).
        result = await tools.execute("service_set_title", {"value": "x", "client_id": 3.0})
        assert result["ok"] is True and result["value"] == "x"


async def test_bad_values_sync_tools(server: RunningServer) -> None:
    def run() -> None:
        with Client(server.url, make_token(4), NS) as client:
            tools = SyncAgentTools(client, CRDTS)
            for name, arguments in BAD:
                _check(name, arguments, tools.execute(name, arguments))
            assert tools.execute("service_add_cart", {"element": 1.5})["value"] == [1.5]

    await asyncio.to_thread(run)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_json_values_still_checked_by_plan(value: float) -> None:
    from syncd.client.tools import _InputError, build_tools, plan_op

    (setter,) = [t for t in build_tools(CRDTS) if t.name == "service_set_title"]
    with pytest.raises(_InputError):
        plan_op(setter, {"value": value})
