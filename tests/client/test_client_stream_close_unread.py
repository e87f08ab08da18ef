"""Closing a WebSocket stream (``aclose``, the blocking stream's ``close``)
that has deltas waiting unread returns at once. It waited the WebSocket's
10 s close timeout: with more messages unread than websockets queues, the
connection stops reading, so the server's answer to our close frame, behind
them, never arrived."""

from __future__ import annotations

import asyncio
import time

from syncd.client import AsyncClient, Client
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

WAIT_S = 10.0
CLOSE_S = 2.0
"""Far below the 10 s close timeout, far above a close on a local socket."""


async def test_aclose_with_deltas_unread_is_prompt(server: RunningServer) -> None:
    async with AsyncClient(server.url, make_token(2), NS) as client:
        await client.gcounter_increment("gc:unread")
        stream = client.subscribe(["gc:unread"])
        async with asyncio.timeout(WAIT_S):
            assert (await anext(stream))["kind"] == "snapshot"
        await client.apply("gc:unread", [{"op": "increment"}] * 100)
        await asyncio.sleep(0.3)  # they arrive, and nobody reads them
        started = time.monotonic()
        await stream.aclose()
        assert time.monotonic() - started < CLOSE_S


async def test_blocking_close_with_deltas_unread_is_prompt(server: RunningServer) -> None:
    def run() -> float:
        with Client(server.url, make_token(3), NS) as client:
            client.gcounter_increment("gc:unread-b")
            stream = client.subscribe(["gc:unread-b"])
            assert stream.next(timeout=WAIT_S)["kind"] == "snapshot"
            for _ in range(2):  # past its buffer (1000): its thread waits
                client.apply("gc:unread-b", [{"op": "increment"}] * 1000)
            time.sleep(0.3)
            started = time.monotonic()
            stream.close()
            return time.monotonic() - started

    assert await asyncio.to_thread(run) < CLOSE_S
