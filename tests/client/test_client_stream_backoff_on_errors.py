"""A WebSocket subscription the service keeps ending with a retryable error
(``unavailable``: its store is away, so every subscribe's replay fails)
backs off between reconnects as after any failure: 50 ms doubling, not 50 ms
for ever. Every ``error`` message reset the backoff as a delta does, so the
client knocked twenty times a second at a server in trouble.

The peer is a small WebSocket server that answers every subscribe so: the
real server does it only with a damaged or absent store."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import msgpack
from websockets.asyncio.server import ServerConnection, serve

from syncd.client import AsyncClient
from tests.client.conftest import NS, make_token

RUN_S = 1.0


async def test_errors_that_are_retried_back_off() -> None:
    connections = 0

    async def handler(ws: ServerConnection) -> None:
        nonlocal connections
        connections += 1
        async for frame in ws:
            message: dict[str, Any] = msgpack.unpackb(frame)
            if message.get("kind") == "subscribe":
                error = {
                    "kind": "error",
                    "id": message["id"],
                    "error": "unavailable",
                    "message": "storage is unavailable",
                }
                await ws.send(msgpack.packb(error))

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        async with AsyncClient(f"http://127.0.0.1:{port}", make_token(2), NS) as client:
            stream = client.subscribe(["gc:away"])
            reader = asyncio.ensure_future(anext(stream))
            await asyncio.sleep(RUN_S)
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            await stream.aclose()
    # Waits of 25-50, 50-100, 100-200, 200-400 ms...: at most 6 in a second
    # (before: one every 25-50 ms, twenty or more).
    assert 2 <= connections <= 6, connections
