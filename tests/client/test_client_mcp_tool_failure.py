"""``syncd mcp`` with a base URL that names another service, one that answers
JSON that is not syncd's (an array where a read view is an object): a tool
call comes back as a tool result flagged as an error (``bad_response``), as
MCP wants tool failures reported, and the server goes on serving; it came
back as a JSON-RPC error with code 0 ("'list' object is not a mapping")."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from tests.client import mcp_support as stdio
from tests.client.conftest import NS, make_token

pytest.importorskip("mcp")

NOT_SYNCD = b'["not", "a", "read", "view"]'


async def _answer_every_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Another service: 200 and a JSON array for every request."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            await reader.readexactly(length)
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n" % len(NOT_SYNCD) + NOT_SYNCD
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


@pytest.fixture
async def not_syncd() -> AsyncIterator[str]:
    server = await asyncio.start_server(_answer_every_request, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


async def test_an_answer_that_is_not_syncds_is_a_tool_error(not_syncd: str) -> None:
    args = ["--base-url", not_syncd, "--token", make_token(3), "--namespace", NS]
    async with stdio.mcp_process(
        [*args, "--crdt", "tags:orset"], stderr=asyncio.subprocess.DEVNULL
    ) as proc:
        await stdio.initialize(proc)
        calls = [
            ("service_read_tags", {}),
            ("service_history_tags", {}),
            ("service_history_tags", {"at": 1}),
            ("service_add_tags", {"element": "a"}),
            ("service_revert_tags", {"client_id": 3}),
            ("service_restore_tags", {"seq": 1}),
        ]
        for request_id, (name, arguments) in enumerate(calls, start=1):
            params = {"name": name, "arguments": arguments}
            await stdio.send(
                proc,
                {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params},
            )
            answer = await stdio.answer(proc)
            assert answer["id"] == request_id and "result" in answer, answer
            result = answer["result"]
            assert result["isError"] is True
            body = json.loads(result["content"][0]["text"])
            assert body["ok"] is False and body["error"] == "bad_response", body
            assert "base URL" in body["message"], body
