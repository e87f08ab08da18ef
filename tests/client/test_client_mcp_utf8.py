"""``syncd mcp`` over raw stdio: a line that is not UTF-8 (JSON-RPC messages
are UTF-8 JSON) is a parse error, answered as such, never a tool call whose
strings had their bad bytes silently replaced with U+FFFD and written to a
shared CRDT; the server goes on serving. Against a real server."""

from __future__ import annotations

import pytest

from syncd.client import AsyncClient
from syncd.client.errors import ServiceError
from tests.client import mcp_support as stdio
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

pytest.importorskip("mcp")

PARSE_ERROR = -32700


def _add(request_id: int, element: bytes) -> bytes:
    params = b'{"name": "service_add_tags", "arguments": {"element": "' + element + b'"}}'
    return (
        b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": ' % request_id
        + params
        + b"}\n"
    )


async def test_a_line_that_is_not_utf8_is_a_parse_error(server: RunningServer) -> None:
    args = ["--base-url", server.url, "--token", make_token(21), "--namespace", NS]
    async with stdio.mcp_process([*args, "--crdt", "tags:orset"]) as proc:
        await stdio.initialize(proc)
        await stdio.send_bytes(proc, _add(1, b"a\xffb"))  # \xff is never UTF-8
        answer = await stdio.answer(proc)
        # Answered with its id, read past the bad byte: the client is not left waiting.
        assert answer["id"] == 1 and answer["error"]["code"] == PARSE_ERROR, answer
        assert "UTF-8" in answer["error"]["message"], answer
        await stdio.send_bytes(proc, _add(2, "é😀".encode()))  # valid UTF-8 goes through as it is
        answer = await stdio.answer(proc)
        assert answer["id"] == 2 and answer["result"]["structuredContent"]["value"] == ["é😀"]
    async with AsyncClient(server.url, make_token(3), NS) as client:
        try:
            value = (await client.fetch("tags"))["value"]
        except ServiceError:
            value = []
        assert value == ["é😀"]
