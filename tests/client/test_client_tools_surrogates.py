"""Agent tools given a lone surrogate, which a model's JSON may carry
(``"\\ud800"``: Python's json reads it) and no request body can: the value,
element or origin comes back as an ``invalid_input`` result instead of a
UnicodeEncodeError out of ``execute``, against the real server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from syncd.client import AgentTools, AsyncClient, Client, SyncAgentTools
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

CRDTS = [("title", "lwwregister"), ("cart", "orset")]

BAD: list[tuple[str, Any]] = [
    ("service_set_title", '{"value": "\\ud800"}'),
    ("service_set_title", {"value": {"text": ["ok", "\udfff"]}}),
    ("service_set_title", {"value": {"\ud800": 1}}),
    ("service_add_cart", '{"element": "a\\udc00b"}'),
    ("service_history_title", '{"origin": "agent:\\ud800"}'),
    ("service_revert_cart", {"origin": "\ud800"}),
]


def _check(name: str, result: Any) -> None:
    assert result["ok"] is False and result["error"] == "invalid_input", (name, result)
    assert "surrogate" in result["message"]
    json.dumps(result)


async def test_lone_surrogates_come_back_as_invalid_input(server: RunningServer) -> None:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        tools = AgentTools(client, CRDTS)
        for name, arguments in BAD:
            _check(name, await tools.execute(name, arguments))
        assert await client.read("title") is None and await client.read("cart") is None
        # A surrogate pair (an emoji, escaped) is text like any other.
        result = await tools.execute("service_set_title", '{"value": "\\ud83d\\ude00"}')
        assert result["ok"] is True and result["value"] == "\U0001f600"


async def test_lone_surrogates_sync_tools(server: RunningServer) -> None:
    def run() -> None:
        with Client(server.url, make_token(4), NS) as client:
            tools = SyncAgentTools(client, CRDTS)
            for name, arguments in BAD:
                _check(name, tools.execute(name, arguments))

    await asyncio.to_thread(run)


def test_an_origin_with_a_lone_surrogate_is_refused_when_the_tools_are_made() -> None:
    with (
        Client("http://127.0.0.1:1", make_token(5), NS) as client,
        pytest.raises(ValueError, match="surrogate"),
    ):
        SyncAgentTools(client, CRDTS, origin="agent:\ud800")
