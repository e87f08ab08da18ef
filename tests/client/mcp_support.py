"""Helpers for the tests that drive ``syncd mcp`` over raw stdio: start the
subprocess, write a line, read an answer, and the MCP initialize handshake."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
ANSWER_TIMEOUT_S = 10
"""Upper bound on waiting for one answer line from a server already started."""

START_TIMEOUT_S = 60
"""Upper bound on waiting for the first answer (to ``initialize``): it comes
once the subprocess's Python has started and imported syncd, the MCP SDK and
httpx, about a second on a quiet machine, and more than ANSWER_TIMEOUT_S
(10 s) on a loaded one (test_client_mcp_batches failed so). Only a bound:
the wait ends as soon as the answer comes."""

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
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


@asynccontextmanager
async def mcp_process(
    args: list[str], *, stderr: int | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``syncd mcp *args`` with pipes on stdin and stdout, killed on the way out."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "syncd", "mcp", *args),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
        env={"PYTHONPATH": str(REPO)},
        cwd=str(REPO),
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def send_bytes(proc: asyncio.subprocess.Process, data: bytes) -> None:
    """Write ``data`` as it is (the caller ends its lines)."""
    assert proc.stdin is not None
    proc.stdin.write(data)
    await proc.stdin.drain()


async def send(proc: asyncio.subprocess.Process, message: dict[str, Any]) -> None:
    """Write ``message`` as one JSON line."""
    await send_bytes(proc, json.dumps(message).encode() + b"\n")


async def answer(
    proc: asyncio.subprocess.Process, timeout_s: float = ANSWER_TIMEOUT_S
) -> dict[str, Any]:
    """The next line the server writes, parsed."""
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout_s)
    assert line, "the server closed its output"
    answer: dict[str, Any] = json.loads(line)
    return answer


async def initialize(proc: asyncio.subprocess.Process, timeout_s: float = START_TIMEOUT_S) -> None:
    """The MCP handshake: ``initialize``, its answer, then ``notifications/initialized``."""
    await send(proc, INIT)
    assert (await answer(proc, timeout_s))["id"] == 0
    await send(proc, INITIALIZED)
