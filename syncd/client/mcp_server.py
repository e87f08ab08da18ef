"""The agent tools as an MCP server over stdio (``syncd mcp``, whose command
line is :mod:`syncd.cli.mcp`).

The server exposes, for one namespace and token, the tools of
:mod:`syncd.client.tools` (``service_read_<id>``, ...) and runs each call
through :meth:`AgentTools.execute`; the result goes back as JSON text (and as
structured content), flagged as an error when not ``ok``. Uses the official
``mcp`` package (the ``syncd[mcp]`` extra), imported only when serving.

The SDK's stdio transport drops a line that is not JSON, or not a JSON-RPC
message, without an answer, leaving a client that sent a request waiting
for ever; :class:`CheckedLines` answers those lines here, as JSON-RPC says:
``-32700`` (parse error) for one that is not JSON (or not UTF-8, with the
request's id when it can be read), ``-32600`` (invalid request) for JSON
that is no message, with the request's id when it has one. A line over
``MAX_LINE_CHARS`` is read past in chunks, never held whole, and answered
``-32600``. A request whose id is neither a string nor an integer (null,
1.5, true: MCP allows no other) is such a message too, answered with a null
id: the SDK would take it for a notification, which has no id, and answer
nothing.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator
from io import TextIOWrapper
from typing import Any, Final, TextIO

from syncd import __version__
from syncd.client.aio import AsyncClient
from syncd.client.tools import AgentTools

SERVER_NAME = "syncd"

log = logging.getLogger("syncd.mcp")

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
"""JSON-RPC 2.0's error codes for a message that is not JSON, and for JSON
that is not a valid message (a batch among them: MCP has none since 2025-06-18)."""


MAX_LINE_CHARS: Final = 16 * 1024 * 1024
"""The longest stdin line (one JSON-RPC message) read, in characters. Far
above any tool call the service can take (its request bodies are 1 MiB by
default), it bounds the memory one line holds: a longer one is read past in
chunks of :data:`SKIP_CHUNK_CHARS` and answered as an invalid request."""

SKIP_CHUNK_CHARS: Final = 1024 * 1024
"""How much of an over-long line is read at a time while skipping it."""


def _request_id(message: Any) -> int | str | None:
    """The id to answer a bad message with: its own when usable, else null."""
    if isinstance(message, dict):
        found = message.get("id")
        if isinstance(found, str) or (type(found) is int):
            return found
    return None


def _is_utf8(line: str) -> bool:
    try:
        line.encode()
    except UnicodeEncodeError:
        return False
    return True


def line_error(line: str) -> tuple[int | str | None, int, str] | None:
    """``(id, code, message)`` of the JSON-RPC error a stdin line deserves,
    or None for a message the SDK can take (or a blank line, ignored)."""
    import mcp_types as types
    from pydantic_core import from_json

    if not line.strip():
        return None
    if not _is_utf8(line):
        # stdin is decoded with surrogateescape: a byte that is not UTF-8
        # comes through as a lone surrogate, which no decoded UTF-8 holds.
        # Replaced with U+FFFD instead, it went on into a tool call and was
        # written to a shared CRDT as if the model had sent it.
        readable = line.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        try:
            found = _request_id(from_json(readable))
        except (ValueError, RecursionError):
            found = None
        return found, PARSE_ERROR, "Parse error: the line is not UTF-8"
    try:
        # The SDK's own JSON parser: it refuses what Python's json takes and
        # JSON does not (a lone surrogate escape, NaN), which would otherwise
        # pass here and be dropped there.
        message = from_json(line)
    except (ValueError, RecursionError):
        return None, PARSE_ERROR, "Parse error: the line is not JSON"
    if (
        isinstance(message, dict)
        and "method" in message
        and "id" in message
        and _request_id(message) is None
    ):
        return None, INVALID_REQUEST, "Invalid Request: the id must be a string or an integer"
    try:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)  # as the SDK reads it
    except (ValueError, RecursionError) as exc:  # pydantic's ValidationError is a ValueError
        kind = "a batch (MCP has none)" if isinstance(message, list) else "not a JSON-RPC message"
        detail = str(exc).splitlines()[0] if str(exc) else ""
        return _request_id(message), INVALID_REQUEST, f"Invalid Request: {kind}: {detail}"
    return None


class CheckedLines:
    """stdin for the SDK's stdio transport: the lines it can take pass
    through, and each other line is answered here with a JSON-RPC error,
    sent on the transport's write stream once :meth:`answer_on` names it."""

    def __init__(self, stdin: TextIO) -> None:
        import anyio

        self._stdin = stdin
        self._sink: Any = None
        self._ready = anyio.Event()

    def answer_on(self, write_stream: Any) -> None:
        self._sink = write_stream
        self._ready.set()

    async def _readline(self, most: int) -> str:
        """Up to ``most`` characters of the current line (a blocking read, in a thread)."""
        import anyio

        line: str = await anyio.to_thread.run_sync(self._stdin.readline, most)
        return line

    async def _lines(self) -> AsyncIterator[str | None]:
        """stdin's lines, None for one over :data:`MAX_LINE_CHARS` (skipped)."""
        while line := await self._readline(MAX_LINE_CHARS + 1):
            if len(line) <= MAX_LINE_CHARS or line.endswith("\n"):
                yield line
                continue
            while (rest := await self._readline(SKIP_CHUNK_CHARS)) and not rest.endswith("\n"):
                pass
            yield None

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self._lines():
            if line is None:
                await self._answer(
                    None,
                    INVALID_REQUEST,
                    f"Invalid Request: the line is longer than {MAX_LINE_CHARS} characters",
                )
                continue
            error = line_error(line)
            if error is None:
                if line.strip():
                    yield line
                continue
            await self._answer(*error)

    async def _answer(self, request_id: int | str | None, code: int, message: str) -> None:
        import anyio
        import mcp_types as types
        from mcp.shared.message import SessionMessage

        await self._ready.wait()
        error = types.JSONRPCError(
            jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
        )
        try:
            await self._sink.send(SessionMessage(error))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the session is over: nobody is left to answer


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
            "Each tool acts on one CRDT; results are JSON with ok, and value on success. "
            "A value too large for one result comes back with truncated: true and "
            "next_offset: call the read tool again with offset=next_offset for the rest."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve(client: AsyncClient, tools: AgentTools) -> None:
    """Answer an MCP client on stdin/stdout until it hangs up, then close ``client``."""
    from mcp.server.stdio import stdio_server

    server = build_server(tools)
    # UTF-8 whatever the locale says, as the SDK's own stdin is read; bytes
    # that are not UTF-8 kept (as lone surrogates) for line_error to refuse.
    stdin = CheckedLines(
        TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="surrogateescape")
    )
    try:
        async with stdio_server(stdin=stdin) as (read_stream, write_stream):  # type: ignore[arg-type]
            stdin.answer_on(write_stream)
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await client.aclose()
