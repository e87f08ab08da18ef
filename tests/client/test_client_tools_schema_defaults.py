"""Agent tools: a call that gives an optional field the ``default`` its JSON
schema declares is the call without it. MCP hosts and models fill declared
defaults in (``offset: 0``, ``limit: 10``, ``as: "text"``); such a call is
valid by the schema the tool lists and must not be refused as combining
fields that do not go together. Against the real server."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from pycrdt import Doc, Text

from syncd.client import AgentTools, AsyncClient
from syncd.client.tools import Tool
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

CRDTS = [("hits", "gcounter"), ("tags", "orset"), ("yd:doc", "ydoc")]


def _document() -> str:
    doc: Doc[Any] = Doc()
    doc["body"] = Text("Hello")
    return base64.b64encode(doc.get_update()).decode()


def with_defaults(tool: Tool, arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` with every declared default filled in, as a host does."""
    properties: dict[str, Any] = tool.input_schema["properties"]
    filled = {name: spec["default"] for name, spec in properties.items() if "default" in spec}
    return {**filled, **arguments}


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("service_read_hits", {}),
        ("service_increment_hits", {}),
        ("service_history_hits", {}),
        ("service_history_hits", {"at": 1}),
        ("service_history_tags", {"before": 2}),
        ("service_read_yd_doc", {}),
        ("service_history_yd_doc", {}),
    ],
)
async def test_declared_defaults_filled_in_are_accepted(
    server: RunningServer, name: str, arguments: dict[str, Any]
) -> None:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        tools = AgentTools(client, CRDTS)
        await tools.execute("service_increment_hits", {})
        await tools.execute("service_add_tags", {"element": "a"})
        await client.apply("yd:doc", {"op": "update", "type": "ydoc", "update": _document()})
        tool = tools.resolve(name)
        result = await tools.execute(name, with_defaults(tool, arguments))
        assert result["ok"] is True, result
        plain = await tools.execute(name, arguments)
        assert plain["ok"] is True, plain


async def test_a_value_other_than_the_default_is_still_refused(server: RunningServer) -> None:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        tools = AgentTools(client, CRDTS)
        await tools.execute("service_increment_hits", {})
        for arguments in ({"offset": 3}, {"at": 1, "limit": 5}):
            result = await tools.execute("service_history_hits", arguments)
            assert result["ok"] is False and result["error"] == "invalid_input", result
        result = await tools.execute("service_read_yd_doc", {"as": "xml"})
        assert result["ok"] is False and "root" in result["message"], result
