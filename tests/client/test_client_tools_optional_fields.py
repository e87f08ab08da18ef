"""Agent tools: an optional field sent as null (as models do, OpenAI's strict
mode among them) means the default for every field, ``amount`` and ``limit``
included; and the history tool's ``at`` (one value) is not silently combined
with the fields that choose changes to list. Against the real server."""

from __future__ import annotations

from typing import Any

import pytest

from syncd.client import AgentTools, AsyncClient
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

CRDTS = [("hits", "gcounter"), ("score", "pncounter")]


async def test_null_optional_fields_take_their_defaults(server: RunningServer) -> None:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        tools = AgentTools(client, CRDTS)
        assert (await tools.execute("service_increment_hits", {"amount": None}))["value"] == 1
        assert (await tools.execute("service_increment_score", '{"amount": null}'))["value"] == 1
        page = await tools.execute(
            "service_history_hits",
            {"limit": None, "at": None, "before": None, "client_id": None, "origin": None},
        )
        assert page["ok"] is True and [change["seq"] for change in page["changes"]] == [1]


@pytest.mark.parametrize(
    "arguments",
    [
        {"at": 1, "client_id": 3},
        {"at": 1, "origin": "agent:x"},
        {"at": 2, "before": 2},
        {"at": 1, "limit": 5},
    ],
)
async def test_at_with_listing_fields_is_invalid_input(
    server: RunningServer, arguments: dict[str, Any]
) -> None:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        tools = AgentTools(client, CRDTS)
        for _ in range(2):
            await tools.execute("service_increment_score", {})
        result = await tools.execute("service_history_score", arguments)
        assert result["ok"] is False and result["error"] == "invalid_input", result
        assert "at" in result["message"]
        at = await tools.execute("service_history_score", {"at": 1, "limit": None})
        assert at["ok"] is True and at["value"] == 1 and at["seq"] == 1
