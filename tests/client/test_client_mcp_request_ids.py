"""``syncd mcp`` over raw stdio: a request whose id is not a string or an
integer (null, a fraction, a boolean, an object) is answered with a JSON-RPC
invalid request error, null id, instead of being taken for a notification and
left unanswered, against a real server."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

pytest.importorskip("mcp")

REPO = Path(__file__).resolve().parents[2]
ANSWER_TIMEOUT_S = 10

BAD_IDS: list[Any] = [None, 1.5, True, {}, [1]]


async def _answer(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), ANSWER_TIMEOUT_S)
    assert line, "the server closed its output"
    answer: dict[str, Any] = json.loads(line)
    return answer


async def _send(proc: asyncio.subprocess.Process, message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    await proc.stdin.drain()


async def test_a_request_with_a_bad_id_is_answered(server: RunningServer) -> None:
    args = ["--base-url", server.url, "--token", make_token(21), "--namespace", NS]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "syncd",
        "mcp",
        *args,
        "--crdt",
        "tags:orset",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={"PYTHONPATH": str(REPO)},
        cwd=str(REPO),
    )
    try:
        init = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        }
        await _send(proc, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
        assert (await _answer(proc))["id"] == 0
        await _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        for bad_id in BAD_IDS:
            await _send(proc, {"jsonrpc": "2.0", "id": bad_id, "method": "tools/list"})
            answer = await _answer(proc)
            assert answer["id"] is None, bad_id
            assert answer["error"]["code"] == -32600, bad_id
            assert "id" in answer["error"]["message"]
        # A notification (no id at all) is still no request, and serving goes on.
        await _send(proc, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}})
        await _send(proc, {"jsonrpc": "2.0", "id": "after", "method": "tools/list"})
        answer = await _answer(proc)
        assert answer["id"] == "after"
        assert answer["result"]["tools"][0]["name"] == "service_read_tags"
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
