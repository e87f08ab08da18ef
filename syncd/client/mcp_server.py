"""The agent tools as an MCP server over stdio (``syncd mcp``, whose command
line is :mod:`syncd.cli.mcp`).

The server exposes, for one namespace and token, the tools of
:mod:`syncd.client.tools` (``service_read_<id>``, ...) and runs each call
through :meth:`AgentTools.execute`; the result goes back as JSON text (and as
structured content), flagged as an error when not ``ok``. Uses the official
``mcp`` package (the ``syncd[mcp]`` extra), imported only when serving.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from syncd import __version__
from syncd.client.aio import AsyncClient
from syncd.client.tools import AgentTools

SERVER_NAME = "syncd"

log = logging.getLogger("syncd.mcp")


def build_server(tools: AgentTools) -> Any:
    """The MCP server (``mcp.server.lowlevel.Server``) exposing ``tools``."""
    import mcp_types as types
    from mcp.server.lowlevel import Server

    listed = [
        types.Tool(name=tool.name, description=tool.description, input_schema=tool.input_schema)
        for tool in tools.tools
    ]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: Any) -> Any:
        result = await tools.execute(params.name, params.arguments or {})
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result, ensure_ascii=False))],
            structured_content=result,
            is_error=not result.get("ok", False),
        )

    return Server(
        SERVER_NAME,
        version=__version__,
        instructions=(
            "Tools that read and change shared CRDTs in a syncd namespace. "
            "Each tool acts on one CRDT; results are JSON with ok, and value on success."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve(client: AsyncClient, tools: AgentTools) -> None:
    """Answer an MCP client on stdin/stdout until it hangs up, then close ``client``."""
    from mcp.server.stdio import stdio_server

    server = build_server(tools)
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await client.aclose()
