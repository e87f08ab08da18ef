"""``syncd mcp``: the agent tools as an MCP server over stdio.

    syncd mcp --base-url URL --token TOKEN --namespace NS --crdt ID[:TYPE] [--crdt ...]

``--base-url``, ``--token`` and ``--namespace`` default to ``SYNCD_BASE_URL``,
``SYNCD_TOKEN`` and ``SYNCD_NAMESPACE``. The server exposes, for one namespace
and token, the tools of :mod:`syncd.client.tools` (``service_read_<id>``, ...)
and runs each call through :meth:`AgentTools.execute`; the result goes back as
JSON text (and as structured content), flagged as an error when not ``ok``.
The token is pre-validated at start: a bad or expired token exits with 2 and
a one-line message before anything is served. Uses the official ``mcp``
package (the ``syncd[mcp]`` extra).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from syncd import __version__
from syncd.client.aio import AsyncClient
from syncd.client.config import ENV_BASE_URL, ENV_NAMESPACE, ENV_TOKEN
from syncd.client.errors import TokenError
from syncd.client.tools import AgentTools, build_tools
from syncd.crdt.types import TYPES, type_for_id

SERVER_NAME = "syncd"

log = logging.getLogger("syncd.mcp")


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise _UsageError(message)


def parse_crdt(text: str) -> tuple[str, str]:
    """``ID`` (a prefixed id: ``gc:visits``) or ``ID:TYPE`` (``visits:gcounter``,
    ``gc:visits:gcounter``) -> ``(id, type)``: the part after the last colon is
    the type when it names one."""
    crdt_id, sep, crdt_type = text.rpartition(":")
    if sep and crdt_id and crdt_type in TYPES:
        return crdt_id, crdt_type
    fixed = type_for_id(text)
    if fixed is not None:
        return text, fixed
    raise ValueError(
        f"--crdt {text!r}: expected a prefixed id (gc:visits) or ID:TYPE (visits:gcounter)"
    )


def _parser() -> _Parser:
    parser = _Parser(
        prog="syncd mcp",
        description="Serve syncd CRDTs as MCP tools over stdio (one namespace, one token).",
    )
    parser.add_argument("--base-url", help=f"service URL (default ${ENV_BASE_URL})")
    parser.add_argument("--token", help=f"bearer token (default ${ENV_TOKEN})")
    parser.add_argument("--namespace", help=f"namespace (default ${ENV_NAMESPACE})")
    parser.add_argument(
        "--crdt",
        action="append",
        default=[],
        metavar="ID[:TYPE]",
        help="a CRDT to expose (repeatable): a prefixed id (gc:visits) or ID:TYPE (visits:gcounter)",
    )
    return parser


def parse_args(
    argv: Sequence[str], env: Mapping[str, str]
) -> tuple[str, str, str, list[tuple[str, str]]]:
    """``(base_url, token, namespace, crdts)``; _UsageError or ValueError when incomplete."""
    args = _parser().parse_args(list(argv))
    base_url = args.base_url or env.get(ENV_BASE_URL)
    token = args.token or env.get(ENV_TOKEN)
    namespace = args.namespace or env.get(ENV_NAMESPACE)
    missing = [
        flag
        for flag, value in (
            ("--base-url", base_url),
            ("--token", token),
            ("--namespace", namespace),
        )
        if not value
    ]
    if missing:
        raise _UsageError(f"missing {', '.join(missing)} (or the SYNCD_* variables)")
    if not args.crdt:
        raise _UsageError("give at least one --crdt ID[:TYPE]")
    assert base_url is not None and token is not None and namespace is not None
    return base_url, token, namespace, [parse_crdt(item) for item in args.crdt]


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
    from mcp.server.stdio import stdio_server

    server = build_server(tools)
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await client.aclose()


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """``syncd mcp ...``; 0 when the client hangs up, 2 on a usage, token or tool error."""
    args = list(sys.argv[1:] if argv is None else argv)
    environ = os.environ if env is None else env
    if args in (["-h"], ["--help"]):
        _parser().print_help()
        return 0
    try:
        base_url, token, namespace, crdts = parse_args(args, environ)
        build_tools(crdts)  # refuse bad ids before the token check and any I/O
        client = AsyncClient(base_url, token, namespace)
    except (_UsageError, ValueError, TokenError) as exc:
        print(f"syncd mcp: {exc}", file=sys.stderr)
        return 2
    try:
        import anyio
        import mcp  # noqa: F401
    except ImportError:
        print("syncd mcp: the mcp package is missing (pip install 'syncd[mcp]')", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    tools = AgentTools(client, crdts)
    anyio.run(serve, client, tools)
    return 0
