"""``syncd mcp`` over raw stdio: a line longer than ``MAX_LINE_CHARS`` is
answered with a JSON-RPC invalid request error without being held whole
(its memory is bounded), and the server goes on serving; it was read whole,
whatever its length, and parsed twice before the SDK parsed it again."""

from __future__ import annotations

import pytest

from syncd.client.mcp_server import INVALID_REQUEST, MAX_LINE_CHARS
from tests.client import mcp_support as stdio
from tests.client.conftest import NS, make_token

pytest.importorskip("mcp")

ANSWER_TIMEOUT_S = 30


async def test_an_over_long_line_is_refused_and_serving_goes_on() -> None:
    # No server: the line is refused before any tool runs.
    args = ["--base-url", "http://127.0.0.1:9", "--token", make_token(3), "--namespace", NS]
    async with stdio.mcp_process([*args, "--crdt", "lw:note"]) as proc:
        await stdio.initialize(proc, ANSWER_TIMEOUT_S)
        params = {"name": "service_set_lw_note", "arguments": {"value": "x" * MAX_LINE_CHARS}}
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
        await stdio.send(proc, call)
        answer = await stdio.answer(proc, ANSWER_TIMEOUT_S)
        assert answer["id"] is None and answer["error"]["code"] == INVALID_REQUEST, answer
        assert str(MAX_LINE_CHARS) in answer["error"]["message"], answer
        await stdio.send_bytes(proc, b'{"jsonrpc": "2.0", "id": 2, "method": "ping"}\n')
        assert await stdio.answer(proc, ANSWER_TIMEOUT_S) == {
            "jsonrpc": "2.0",
            "id": 2,
            "result": {},
        }
