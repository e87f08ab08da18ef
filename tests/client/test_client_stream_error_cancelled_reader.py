"""A stream's final error reaches a reader even when its read is cancelled
while the stream closes.

A refusal that ends a subscription (here ``forbidden``: the token may not
read one of the ids) closes the stream, then raises. Closing a WebSocket
waits for the server's answer to the close frame; a reader that timed out
its read there lost the error, and its next read ended the iteration
(StopAsyncIteration) as if the stream had finished normally. The real
server behind a TCP proxy that stops the client's bytes, so the close
waits."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from syncd.client import AsyncClient, ServiceError
from tests.client.conftest import NS, make_token
from tests.client.stalling_proxy import proxy_to
from tests.conftest import RunningServer

WAIT_S = 10.0
READ_TIMEOUT_S = 0.3
"""Far longer than handling a message, far shorter than a close that waits
for an answer (websockets waits 10 s)."""


async def test_a_refusal_survives_a_read_cancelled_while_closing(server: RunningServer) -> None:
    async with AsyncClient(server.url, make_token(2), NS) as writer, proxy_to(server) as proxy:
        await writer.gcounter_increment("gc:open")
        token = make_token(3, read=("gc:open",))
        async with AsyncClient(f"http://127.0.0.1:{proxy.port}", token, NS) as reader:
            sub = reader.subscribe(["gc:open", "gc:secret"])
            async with asyncio.timeout(WAIT_S):
                assert (await anext(sub))["kind"] == "snapshot"
                while len(sub._ws.recv_messages.frames) < 2:  # type: ignore[union-attr]
                    await asyncio.sleep(0.01)  # the refusal is in, not read yet
            proxy.stall()  # our close frame will not reach the server
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(anext(sub), READ_TIMEOUT_S)
            with pytest.raises(ServiceError) as refused:
                await asyncio.wait_for(anext(sub), WAIT_S)
            assert refused.value.code == "forbidden"
            with pytest.raises(StopAsyncIteration):
                await anext(sub)
            proxy.resume()
