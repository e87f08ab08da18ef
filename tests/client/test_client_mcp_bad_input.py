"""``syncd mcp`` over raw stdio: every line that is not a JSON-RPC message is
answered with a JSON-RPC error (parse error, invalid request), the server
goes on serving, and tool results stay within the result limit, against a
real server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from syncd.client.bounded import size
from tests.client import mcp_support as stdio
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

pytest.importorskip("mcp")


class Session:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def send(self, line: str) -> None:
        await stdio.send_bytes(self.proc, line.encode() + b"\n")

    async def answer(self, timeout_s: float = stdio.ANSWER_TIMEOUT_S) -> dict[str, Any]:
        return await stdio.answer(self.proc, timeout_s)

    async def call(self, line: str, timeout_s: float = stdio.ANSWER_TIMEOUT_S) -> dict[str, Any]:
        await self.send(line)
        return await self.answer(timeout_s)


@pytest.fixture
async def session(server: RunningServer) -> AsyncIterator[Session]:
    args = ["--base-url", server.url, "--token", make_token(21), "--namespace", NS]
    args += ["--crdt", "tags:orset", "--crdt", "yd:doc", "--max-result-chars", "1000"]
    async with stdio.mcp_process(args) as proc:
        session = Session(proc)
        answer = await session.call(json.dumps(stdio.INIT), stdio.START_TIMEOUT_S)
        assert "offset=next_offset" in answer["result"]["instructions"]
        await session.send(json.dumps(stdio.INITIALIZED))
        yield session


def _call(request_id: int, name: str, arguments: Any) -> str:
    params = {"name": name, "arguments": arguments}
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    )


BAD_LINES: list[tuple[str, Any, int]] = [
    ("not json", None, -32700),
    ('{"jsonrpc": "2.0", "id": 7, "method": "tools/call"', None, -32700),
    ("[1, 2]", None, -32600),
    ("[]", None, -32600),
    ("42", None, -32600),
    ('{"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": "x"}', 8, -32600),
    ('{"jsonrpc": "1.0", "id": "a", "method": "tools/list"}', "a", -32600),
    ('{"jsonrpc": "2.0", "id": 9, "method": 5}', 9, -32600),
    ("[" * 100_000, None, -32700),
    # JSON to Python's json module, not to the SDK's parser: answered all the same.
    (
        '{"jsonrpc": "2.0", "id": 10, "method": "tools/list", "params": {"a": "\\ud800"}}',
        None,
        -32700,
    ),
]
"""(line, the id its answer carries, the JSON-RPC error code)."""


async def test_a_bad_line_is_answered_and_serving_goes_on(session: Session) -> None:
    """Every line in one session: each bad one is answered and the next
    request after it is served (one process for all: a start per line cost
    half a second)."""
    for line, answer_id, code in BAD_LINES:
        answer = await session.call(line)
        assert answer["jsonrpc"] == "2.0" and answer["id"] == answer_id, (line[:80], answer)
        assert answer["error"]["code"] == code and answer["error"]["message"], (line[:80], answer)
        listed = await session.call('{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}')
        assert listed["id"] == 1 and len(listed["result"]["tools"]) == 8, line[:80]


async def test_bad_tool_calls_are_errors_the_model_reads(session: Session) -> None:
    unknown = await session.call(_call(2, "service_fly_tags", {}))
    assert unknown["id"] == 2 and unknown["result"]["isError"] is True
    assert json.loads(unknown["result"]["content"][0]["text"])["error"] == "unknown_tool"
    for request_id, arguments in enumerate(([1], "str", {"element": float("inf")}), start=3):
        answer = await session.call(_call(request_id, "service_add_tags", arguments))
        assert answer["id"] == request_id
        assert "error" in answer or answer["result"]["isError"] is True, answer


async def test_a_large_value_comes_back_paged_over_mcp(
    session: Session, server: RunningServer
) -> None:
    app = server.app
    assert app is not None
    elements = [{"op": "add", "type": "orset", "element": f"tag-{n:04d}"} for n in range(300)]
    from syncd.client import AsyncClient

    async with AsyncClient(server.url, make_token(3), NS) as client:
        await client.apply("tags", elements)
    answer = await session.call(_call(5, "service_read_tags", {}))
    body = json.loads(answer["result"]["content"][0]["text"])
    assert body["truncated"] is True and size(body) <= 1000 and body["total"] == 300
    answer = await session.call(_call(6, "service_read_tags", {"offset": body["next_offset"]}))
    assert json.loads(answer["result"]["content"][0]["text"])["offset"] == body["next_offset"]
