"""The MCP server: the official mcp stdio client launches ``python -m syncd mcp``
against a running server, lists the tools and calls them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from syncd.client.mcp_server import main, parse_args, parse_crdt
from syncd.client.tools import build_tools
from tests.client.conftest import NS, make_token, now_ms
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
        ]
        result = await session.call_tool("service_add_tags", {"element": "x"})
        assert json.loads(result.content[0].text) == {"ok": True, "seq": 1, "value": ["x"]}


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "syncd", "mcp", *args],
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", **(env or {})},
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "missing --base-url"),
        (
            [
                "--base-url",
                "http://h",
                "--token",
                "garbage",
                "--namespace",
                NS,
                "--crdt",
                "a:gcounter",
            ],
            "token",
        ),
        (["--base-url", "http://h", "--token", "T", "--namespace", NS], "--crdt"),
        (
            [
                "--base-url",
                "http://h",
                "--token",
                "T",
                "--namespace",
                NS,
                "--crdt",
                "gc:a-b",
                "--crdt",
                "gc:a_b",
            ],
            "share the tool name",
        ),
        (
            ["--base-url", "http://h", "--token", "T", "--namespace", NS, "--crdt", "a"],
            "prefixed id",
        ),
        (
            ["--base-url", "http://h", "--token", "T", "--namespace", NS, "--crdt", "a:sundial"],
            "prefixed id",
        ),
    ],
)
def test_bad_invocations_exit_2_with_a_message(args: list[str], message: str) -> None:
    # main() in-process: every one of these stops before any I/O.
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(args, env={}) == 2
    assert message in err.getvalue() and err.getvalue().startswith("syncd mcp: ")


def test_expired_token_stops_the_real_command() -> None:
    expired = make_token(ttl_ms=1, issued_ms=now_ms() - 10_000)
    done = _run(
        ["--crdt", "a:gcounter"],
        {"SYNCD_BASE_URL": "http://127.0.0.1:9", "SYNCD_TOKEN": expired, "SYNCD_NAMESPACE": NS},
    )
    assert done.returncode == 2 and "expired" in done.stderr and done.stdout == ""


def test_parse_args_flags_win_over_env() -> None:
    env: dict[str, Any] = {
        "SYNCD_BASE_URL": "http://env",
        "SYNCD_TOKEN": "t",
        "SYNCD_NAMESPACE": "n",
    }
    assert parse_args(
        ["--base-url", "http://flag", "--crdt", "a:orset", "--crdt", "b:gcounter"], env
    ) == (
        "http://flag",
        "t",
        "n",
        [("a", "orset"), ("b", "gcounter")],
    )
