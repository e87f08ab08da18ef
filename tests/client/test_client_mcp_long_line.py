"""``syncd mcp`` over raw stdio: a line longer than ``MAX_LINE_CHARS`` is
answered with a JSON-RPC invalid request error without being held whole
(its memory is bounded), and the server goes on serving; it was read whole,
whatever its length, and parsed twice before the SDK parsed it again."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from syncd.client.mcp_server import INVALID_REQUEST, MAX_LINE_CHARS
from tests.client.conftest import NS, make_token

pytest.importorskip("mcp")

REPO = Path(__file__).resolve().parents[2]
ANSWER_TIMEOUT_S = 30

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


async def _answer(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), ANSWER_TIMEOUT_S)
    assert line, "the server closed its output"
    answer: dict[str, Any] = json.loads(line)
    return answer


async def _send(proc: asyncio.subprocess.Process, line: bytes) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + b"\n")
    await proc.stdin.drain()


async def test_an_over_long_line_is_refused_and_serving_goes_on() -> None:
    # No server: the line is refused before any tool runs.
    args = ["--base-url", "http://127.0.0.1:9", "--token", make_token(3), "--namespace", NS]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "syncd", "mcp", *args, "--crdt", "lw:note"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={"PYTHONPATH": str(REPO)},
        cwd=str(REPO),
    )
    try:
        await _send(proc, json.dumps(INIT).encode())
        assert (await _answer(proc))["id"] == 0
        await _send(proc, b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        params = {"name": "service_set_lw_note", "arguments": {"value": "x" * MAX_LINE_CHARS}}
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
        await _send(proc, json.dumps(call).encode())
        answer = await _answer(proc)
        assert answer["id"] is None and answer["error"]["code"] == INVALID_REQUEST, answer
        assert str(MAX_LINE_CHARS) in answer["error"]["message"], answer
        await _send(proc, b'{"jsonrpc": "2.0", "id": 2, "method": "ping"}')
        assert await _answer(proc) == {"jsonrpc": "2.0", "id": 2, "result": {}}
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
