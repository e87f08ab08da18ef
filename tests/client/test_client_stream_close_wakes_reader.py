"""``aclose()`` from another task while a reader waits in ``anext`` on the
stream ends that reader's iteration (StopAsyncIteration: its ``async for``
just ends), over SSE as over the WebSocket. Over SSE the reader got
CancelledError instead (the read it was waiting for was cancelled under it),
so the reader's task ended cancelled and awaiting it raised CancelledError in
the caller, which had cancelled nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from syncd.client import AsyncClient
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

WAIT_S = 10.0


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(server.url, make_token(2), NS) as c:
        yield c


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_aclose_ends_a_waiting_reader(client: AsyncClient, via: str) -> None:
    await client.gcounter_increment("gc:quiet")
    stream = client.subscribe(["gc:quiet"]) if via == "ws" else client.events("gc:quiet")
    got: list[Any] = []

    async def consume() -> str:
        async for delta in stream:
            got.append((delta["kind"], delta["seq"]))
        return "ended"

    reader = asyncio.create_task(consume())
    async with asyncio.timeout(WAIT_S):
        while not got:
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # the reader waits for the next delta
    await stream.aclose()
    async with asyncio.timeout(WAIT_S):
        done, _ = await asyncio.wait([reader])
    assert not reader.cancelled()
    assert reader.result() == "ended" and got == [("snapshot", 1)]
