"""``syncd mcp`` over raw stdio: a line that is not UTF-8 (JSON-RPC messages
are UTF-8 JSON) is a parse error, answered as such, never a tool call whose
strings had their bad bytes silently replaced with U+FFFD and written to a
shared CRDT; the server goes on serving. Against a real server."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from syncd.client import AsyncClient
from syncd.client.errors import ServiceError
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

pytest.importorskip("mcp")

REPO = Path(__file__).resolve().parents[2]
ANSWER_TIMEOUT_S = 10
PARSE_ERROR = -32700

INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


def _add(request_id: int, element: bytes) -> bytes:
    params = b'{"name": "service_add_tags", "arguments": {"element": "' + element + b'"}}'
    return (
        b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": ' % request_id
        + params
        + b"}\n"
    )


async def _answer(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), ANSWER_TIMEOUT_S)
    assert line, "the server closed its output"
    answer: dict[str, Any] = json.loads(line)
    return answer


async def _send(proc: asyncio.subprocess.Process, line: bytes) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line)
    await proc.stdin.drain()


async def test_a_line_that_is_not_utf8_is_a_parse_error(server: RunningServer) -> None:
    args = ["--base-url", server.url, "--token", make_token(21), "--namespace", NS]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "syncd", "mcp", *args, "--crdt", "tags:orset"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={"PYTHONPATH": str(REPO)},
        cwd=str(REPO),
    )
    try:
        await _send(proc, json.dumps(INIT).encode() + b"\n")
        assert (await _answer(proc))["id"] == 0
        await _send(proc, b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        await _send(proc, _add(1, b"a\xffb"))  # \xff is never UTF-8
        answer = await _answer(proc)
        # Answered with its id, read past the bad byte: the client is not left waiting.
        assert answer["id"] == 1 and answer["error"]["code"] == PARSE_ERROR, answer
        assert "UTF-8" in answer["error"]["message"], answer
        await _send(proc, _add(2, "é😀".encode()))  # valid UTF-8 goes through as it is
        answer = await _answer(proc)
        assert answer["id"] == 2 and answer["result"]["structuredContent"]["value"] == ["é😀"]
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
    async with AsyncClient(server.url, make_token(3), NS) as client:
        try:
            value = (await client.fetch("tags"))["value"]
        except ServiceError:
            value = []
        assert value == ["é😀"]
