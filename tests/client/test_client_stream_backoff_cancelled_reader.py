"""A stream's reconnect backoff holds for a reader that times out its reads.

A reader polling with a short timeout (``wait_for(anext(stream), 0.02)``)
cancels the stream's wait between two connection attempts each time; the
next read tried again at once, so a service that was down got an attempt per
read (fifty a second) instead of 50 ms doubling. The wait now ends at a time
kept across reads. The peer accepts each connection and closes it (a proxy
with no service behind it)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from syncd.client import AsyncClient
from tests.client.conftest import NS, make_token

RUN_S = 1.0
READ_TIMEOUT_S = 0.02
MAX_ATTEMPTS = 8
"""Waits of 25-50, 50-100, 100-200, 200-400, 400-800 ms: at most six attempts
in a second, some slack for a slow machine; a read's each was fifty."""


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_a_polling_reader_does_not_skip_the_backoff(via: str) -> None:
    attempts = 0

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal attempts
        attempts += 1
        writer.close()

    server = await asyncio.start_server(refuse, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with AsyncClient(f"http://127.0.0.1:{port}", make_token(2), NS) as client:
            stream = client.subscribe(["gc:x"]) if via == "ws" else client.events("gc:x")
            async with stream:
                loop = asyncio.get_running_loop()
                end = loop.time() + RUN_S
                while loop.time() < end:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(anext(stream), READ_TIMEOUT_S)
    finally:
        server.close()
        await server.wait_closed()
    assert 2 <= attempts <= MAX_ATTEMPTS, attempts
