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

The SDK reads one message a line and has no JSON-RPC batches, which MCP
2025-03-26 has (2025-06-18 took them out again) and the SDK agrees to. When
that is the version the ``initialize`` answer names, :class:`CheckedLines`
serves a batch as JSON-RPC 2.0 says: its messages go to the SDK one by one,
each request under an id of its own (the client's may repeat), and the
answers are gathered on the way out (:meth:`CheckedLines.answers`) into one
array line with the client's ids back; a notification gets no answer (a batch
of them, none), an element that is no message is answered in the array, and
an empty batch is ``-32600``. Under other versions a batch stays ``-32600``.
"""

from __future__ import annotations

import itertools
import json
import logging
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from io import TextIOWrapper
from types import TracebackType
from typing import Any, Final, TextIO, cast

from syncd import __version__
from syncd.client.aio import AsyncClient
from syncd.client.tools import AgentTools

SERVER_NAME = "syncd"

log = logging.getLogger("syncd.mcp")

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
"""JSON-RPC 2.0's error codes for a message that is not JSON, and for JSON
that is not a valid message (a batch among them, unless the session's MCP
version has batches)."""

BATCH_VERSIONS: Final = frozenset({"2025-03-26"})
"""The MCP protocol versions with JSON-RPC batches: 2025-03-26 added them,
2025-06-18 took them out, and 2024-11-05 said nothing of them."""

MAX_BATCH_MESSAGES: Final = 100
"""The most messages one batch may hold (more is ``-32600``): each request
in it runs at once, and a line of 16 Mi characters could hold millions."""


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
        kind = (
            "a batch (only MCP 2025-03-26 has them)"
            if isinstance(message, list)
            else "not a JSON-RPC message"
        )
        detail = str(exc).splitlines()[0] if str(exc) else ""
        return _request_id(message), INVALID_REQUEST, f"Invalid Request: {kind}: {detail}"
    return None


@dataclass
class _Batch:
    """The answers of one batch, sent as one array once none is awaited."""

    answers: list[Any] = field(default_factory=list)
    awaited: int = 0


def _error(request_id: int | str | None, code: int, message: str) -> Any:
    import mcp_types as types

    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
    )


class CheckedLines:
    """stdin for the SDK's stdio transport: the lines it can take pass
    through, each other line is answered here with a JSON-RPC error, and a
    batch is served when the session's version has them; answers go on the
    transport's write stream once :meth:`answers` wraps it."""

    def __init__(self, stdin: TextIO) -> None:
        import anyio

        self._stdin = stdin
        self._sink: Any = None
        self._ready = anyio.Event()
        self._version: str | None = None
        """The protocol version the last ``initialize`` answer named."""
        self._initializing: set[int | str] = set()
        """Ids of ``initialize`` requests not answered yet."""
        self._prefix = f"syncd-batch-{uuid.uuid4().hex}-"
        """Begins the id each request of a batch goes to the SDK under: no
        client id can be it by chance."""
        self._numbers = itertools.count()
        self._pending: dict[str, tuple[_Batch, int | str]] = {}
        """Our id of each batch request not answered -> its batch, its own id."""

    def answers(self, write_stream: Any) -> Any:
        """``write_stream`` (the transport's) as the server is to write to:
        answers to a batch's requests are held there and sent as one array."""
        self._sink = write_stream
        self._ready.set()
        return _Answers(self, write_stream)

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
                    yield await self._noted(line)
                continue
            if (
                self._version in BATCH_VERSIONS
                and error[1] == INVALID_REQUEST
                and line.lstrip().startswith("[")
            ):
                from pydantic_core import from_json

                async for part in self._batch(from_json(line)):
                    yield part
                continue
            await self._answer(*error)

    async def _noted(self, line: str) -> str:
        """``line`` (a message the SDK takes) as the SDK is to get it, noting an
        ``initialize`` request's id; a cancellation of a batch's request is
        sent under the id that request went to the SDK with."""
        if "initialize" not in line and not (self._pending and "cancelled" in line):
            return line  # neither: skip parsing the line again
        from pydantic_core import from_json

        message = from_json(line)  # as line_error read it: it parses
        if not isinstance(message, dict):
            return line
        if message.get("method") == "initialize" and "id" in message:
            self._initializing.add(message["id"])
        params = message.get("params")
        if message.get("method") == "notifications/cancelled" and isinstance(params, dict):
            cancelled = params.get("requestId")
            ours = next(
                (
                    key
                    for key, (_, own) in self._pending.items()
                    if type(own) is type(cancelled) and own == cancelled  # not 1 for true
                ),
                None,
            )
            if ours is not None:
                # A cancelled request gets no answer: its batch no longer awaits it.
                batch, _ = self._pending.pop(ours)
                batch.awaited -= 1
                if not batch.awaited:
                    await self._send_batch(batch)
                return json.dumps(
                    {**message, "params": {**params, "requestId": ours}}, ensure_ascii=False
                )
        return line

    async def _batch(self, items: list[Any]) -> AsyncIterator[str]:
        """The lines a batch gives the SDK; its answers gathered by :meth:`gathered`."""
        if not items or len(items) > MAX_BATCH_MESSAGES:
            why = "an empty batch" if not items else f"over {MAX_BATCH_MESSAGES} messages"
            await self._answer(None, INVALID_REQUEST, f"Invalid Request: {why}")
            return
        batch = _Batch()
        lines: list[str] = []
        for item in items:
            line = json.dumps(item, ensure_ascii=False)
            error = line_error(line)
            if error is None and item.get("method") == "initialize":
                error = (
                    _request_id(item),
                    INVALID_REQUEST,
                    "Invalid Request: initialize cannot be part of a batch",
                )
            if error is not None:
                batch.answers.append(_error(*error))
                continue
            if "method" in item and "id" in item:  # a request: answered under our id
                ours = f"{self._prefix}{next(self._numbers)}"
                self._pending[ours] = (batch, item["id"])
                batch.awaited += 1
                line = json.dumps({**item, "id": ours}, ensure_ascii=False)
            lines.append(line)
        if not batch.awaited:
            await self._send_batch(batch)
        for line in lines:
            yield line

    async def gathered(self, message: Any) -> bool:
        """Whether ``message`` (one the server writes) is an answer held for
        its batch, rather than to send; notes the version ``initialize`` names."""
        import mcp_types as types

        if not isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            return False
        if message.id in self._initializing:
            self._initializing.discard(message.id)
            if isinstance(message, types.JSONRPCResponse):
                version = message.result.get("protocolVersion")
                self._version = version if isinstance(version, str) else None
        if not (isinstance(message.id, str) and message.id.startswith(self._prefix)):
            return False
        found = self._pending.pop(message.id, None)
        if found is not None:  # else its request was cancelled: no answer is due
            batch, own = found
            batch.answers.append(message.model_copy(update={"id": own}))
            batch.awaited -= 1
            if not batch.awaited:
                await self._send_batch(batch)
        return True

    async def _send_batch(self, batch: _Batch) -> None:
        """A batch's answers as one array (none when it has none)."""
        from pydantic import RootModel

        if batch.answers:
            # The transport writes message.model_dump_json(): an array model
            # writes the array on one line as the SDK writes a message.
            await self._send(RootModel[list[Any]](batch.answers))

    async def _answer(self, request_id: int | str | None, code: int, message: str) -> None:
        await self._send(_error(request_id, code, message))

    async def _send(self, message: Any) -> None:
        import anyio
        from mcp.shared.message import SessionMessage

        await self._ready.wait()
        try:
            await self._sink.send(SessionMessage(cast(Any, message)))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the session is over: nobody is left to answer


class _Answers:
    """The server's write stream: what it writes goes on to the transport's,
    except answers :meth:`CheckedLines.gathered` holds for a batch."""

    def __init__(self, lines: CheckedLines, sink: Any) -> None:
        self._lines = lines
        self._sink = sink

    async def send(self, item: Any, /) -> None:
        if not await self._lines.gathered(item.message):
            await self._sink.send(item)

    async def aclose(self) -> None:
        await self._sink.aclose()

    async def __aenter__(self) -> _Answers:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()


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
            answers = stdin.answers(write_stream)
            await server.run(read_stream, answers, server.create_initialization_options())
    finally:
        await client.aclose()
