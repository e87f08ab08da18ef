"""A stream (SSE or WebSocket) refused 429 ``rate_limited`` waits the answer's
``Retry-After`` before asking again (bounded by ``RETRY_AFTER_MAX_S``),
instead of knocking at its reconnect backoff (50 ms, 100 ms, ...) while the
token's window is still full. A real server, a token limited to one request
a second (``rl``, docs/permissions.md#rate-limits), and a transport that
passes every request to the server and notes what came back."""

from __future__ import annotations

import asyncio
import time

import httpx

from syncd.client import AsyncClient
from syncd.client.retry import RETRY_AFTER_MAX_S
from tests.client.conftest import NS, limited_token
from tests.conftest import RunningServer


class NotingTransport(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[float, int, str | None]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        if request.url.path.endswith("/events"):
            when = time.monotonic()
            self.events.append((when, response.status_code, response.headers.get("retry-after")))
        return response


async def test_a_rate_limited_stream_waits_retry_after(server: RunningServer) -> None:
    transport = NotingTransport()
    async with AsyncClient(server.url, limited_token(), NS, transport=transport) as client:
        await client.gcounter_increment("gc:rl")  # the one request of this second
        async with client.events("gc:rl") as stream, asyncio.timeout(2 * RETRY_AFTER_MAX_S):
            snapshot = await anext(stream)
        assert snapshot["kind"] == "snapshot" and snapshot["seq"] == 1
    (refused_at, refused, retry_after), (served_at, served, _) = transport.events
    assert (refused, served) == (429, 200) and retry_after is not None
    assert served_at - refused_at >= float(retry_after) * 0.99


async def test_a_rate_limited_websocket_upgrade_waits_too(server: RunningServer) -> None:
    """The same for a WebSocket upgrade refused 429: the waits the stream
    takes (its ``sleep``, which really sleeps) start at ``Retry-After``."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(seconds)

    async with AsyncClient(server.url, limited_token(), NS) as client:
        await client.gcounter_increment("gc:rl-ws")
        async with client.subscribe(["gc:rl-ws"], sleep=sleep) as sub:
            async with asyncio.timeout(2 * RETRY_AFTER_MAX_S):
                snapshot = await anext(sub)
    assert snapshot["kind"] == "snapshot" and snapshot["seq"] == 1
    # The server's Retry-After is whole seconds, at least 1, counted from
    # the refusal: what is left of it when the read takes the refusal.
    assert waits and waits[0] >= 0.99
    assert sub.connects == 1
