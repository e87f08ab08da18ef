"""An AsyncClient's SSE streams each hold a connection of its httpx pool for
as long as they last; they must not take the pool from its requests. With
httpx's default limit (100 connections), 100 ``events()`` streams left every
other request of the client waiting for a connection until its timeout
(TransportError ``PoolTimeout``), and a 101st stream retried for ever. The
pool has no connection limit now (the service bounds connections:
``SERVICE_MAX_CONNECTIONS``)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from syncd.client import AsyncClient
from tests.client.conftest import NS, make_token

STREAMS = 101
"""One more than httpx's default pool limit."""

WAIT_S = 20.0


async def test_many_event_streams_leave_room_for_requests(make_server: Any) -> None:
    server = await make_server(rate_limit=10_000)
    async with AsyncClient(server.url, make_token(5), NS, timeout=2.0) as client:
        await client.gcounter_increment("gc:many", 3)
        async with contextlib.AsyncExitStack() as streams:
            opened = [
                await streams.enter_async_context(client.events(f"gc:many-{i}"))
                for i in range(STREAMS)
            ]
            async with asyncio.timeout(WAIT_S):
                for stream in opened:
                    assert (await anext(stream))["kind"] == "snapshot"
                answer = await client.read("gc:many")
            assert answer is not None and answer["value"] == 3
