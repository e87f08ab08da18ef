"""The MCP server: the official mcp stdio client launches ``python -m syncd mcp``
against a running server, lists the tools and calls them (the command line's
refusals: tests/cli/test_mcp.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from syncd.auth.authenticator import ROOT
from syncd.cli.mcp import parse_crdt
from syncd.client.tools import build_tools
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

mcp = pytest.importorskip("mcp")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CRDTS = ["hits:gcounter", "motto:lwwregister", "tags:orset"]


def _params(args: list[str], env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "syncd", "mcp", *args],
        env={"PYTHONPATH": str(REPO), **(env or {})},
        cwd=str(REPO),
    )


async def test_mcp_session_lists_and_calls_tools(server: RunningServer) -> None:
    args = ["--base-url", server.url, "--token", make_token(21), "--namespace", NS]
    for item in CRDTS:
        args += ["--crdt", item]
    async with stdio_client(_params(args)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.list_tools()
        expected = build_tools(parse_crdt(item) for item in CRDTS)
        assert [tool.name for tool in listed.tools] == [tool.name for tool in expected]
        by_name = {tool.name: tool for tool in listed.tools}
        for tool in expected:
            assert by_name[tool.name].input_schema == tool.input_schema
            assert by_name[tool.name].description == tool.description

        result = await session.call_tool("service_increment_hits", {"amount": 3})
        assert not result.is_error
        body = json.loads(result.content[0].text)
        assert body == {"ok": True, "seq": 1, "value": 3}
        assert result.structured_content == body

        result = await session.call_tool("service_set_motto", {"value": {"say": "hi"}})
        assert json.loads(result.content[0].text)["value"] == {"say": "hi"}
        result = await session.call_tool("service_read_hits", {})
        assert json.loads(result.content[0].text)["value"] == 3

        result = await session.call_tool("service_add_tags", {})
        assert result.is_error
        assert json.loads(result.content[0].text)["error"] == "invalid_input"
    view = server.app.engine.read(NS, "hits")
    assert view is not None and view["value"] == 3


async def test_mcp_serves_prefixed_ids(server: RunningServer) -> None:
    args = ["--base-url", server.url, "--token", make_token(21), "--namespace", NS]
    args += ["--crdt", "gc:visits", "--crdt", "lw:page-title:lwwregister"]
    async with stdio_client(_params(args)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        names = [tool.name for tool in (await session.list_tools()).tools]
        assert names == [
            "service_read_gc_visits",
            "service_increment_gc_visits",
            "service_history_gc_visits",
            "service_read_lw_page_title",
            "service_set_lw_page_title",
            "service_history_lw_page_title",
            "service_restore_lw_page_title",
            "service_revert_lw_page_title",
        ]
        result = await session.call_tool("service_increment_gc_visits", {"amount": 2})
        assert json.loads(result.content[0].text) == {"ok": True, "seq": 1, "value": 2}
        result = await session.call_tool("service_set_lw_page_title", {"value": "Home"})
        assert json.loads(result.content[0].text)["value"] == "Home"
    assert server.app.engine.read(NS, "gc:visits")["value"] == 2  # type: ignore[index]


async def test_mcp_config_from_environment(server: RunningServer) -> None:
    env = {"SYNCD_BASE_URL": server.url, "SYNCD_TOKEN": make_token(22), "SYNCD_NAMESPACE": NS}
    params = _params(["--crdt", "tags:orset"], env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        names = [tool.name for tool in (await session.list_tools()).tools]
        assert names == [
            "service_read_tags",
            "service_add_tags",
            "service_history_tags",
            "service_restore_tags",
            "service_revert_tags",
        ]
        result = await session.call_tool("service_add_tags", {"element": "x"})
        assert json.loads(result.content[0].text) == {"ok": True, "seq": 1, "value": ["x"]}


async def test_mcp_with_an_origin_stamps_its_ops_and_reverts_them(server: RunningServer) -> None:
    args = ["--base-url", server.url, "--token", make_token(22), "--namespace", NS]
    args += ["--crdt", "tags:orset", "--origin", "agent:mcp-1"]
    await server.app.service.apply_ops(
        NS, "tags", {"op": "add", "element": "human", "type": "orset"}, ROOT, "http"
    )
    async with stdio_client(_params(args)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("service_add_tags", {"element": "agent"})
        assert json.loads(result.content[0].text)["value"] == ["agent", "human"]
        result = await session.call_tool("service_history_tags", {"origin": "agent:mcp-1"})
        changes = json.loads(result.content[0].text)["changes"]
        assert [(c["client_id"], c["origin"]) for c in changes] == [(22, "agent:mcp-1")]
        result = await session.call_tool("service_revert_tags", {"origin": "agent:mcp-1"})
        body = json.loads(result.content[0].text)
        assert body["reverted"] == 1 and body["value"] == ["human"]
