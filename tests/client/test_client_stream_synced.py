"""The ``synced`` message that ends each start (docs/protocol.md#resuming), as
the streams see it: never a delta; ``is_synced``; yielded with
``synced_events=True``, including after an up-to-date resume, which gets
nothing else."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from syncd.client import AsyncClient
from syncd.client.stream import EventStream, Subscription
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

WAIT_S = 10.0


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(server.url, make_token(2), NS) as c:
        yield c


def _open(
    client: AsyncClient, via: str, crdt_id: str, **options: Any
) -> Subscription | EventStream:
    if via == "ws":
        return client.subscribe([crdt_id], **options)
    return client.events(crdt_id, **options)


async def _next(stream: AsyncIterator[dict[str, Any]]) -> dict[str, Any]:
    async with asyncio.timeout(WAIT_S):
        return await anext(stream)


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_synced_is_never_a_delta(client: AsyncClient, via: str) -> None:
    await client.gcounter_increment("gc:q", 2)
    async with _open(client, via, "gc:q") as stream:
        assert not stream.is_synced("gc:q")
        snapshot = await _next(stream)
        assert (snapshot["kind"], snapshot["seq"]) == ("snapshot", 1)
        await client.gcounter_increment("gc:q", 1)
        delta = await _next(stream)  # the synced message between is passed over
        assert (delta["kind"], delta["seq"]) == ("op", 2)
        assert stream.is_synced("gc:q")


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_synced_events_mark_every_start(
    client: AsyncClient, server: RunningServer, via: str
) -> None:
    await client.gcounter_increment("gc:y", 2)
    async with _open(client, via, "gc:y", synced_events=True) as stream:
        snapshot = await _next(stream)
        assert snapshot["kind"] == "snapshot"
        synced = await _next(stream)
        epoch = snapshot["epoch"]
        assert synced == {"kind": "synced", "ns": NS, "id": "gc:y", "seq": 1, "epoch": epoch}
        assert stream.is_synced("gc:y")
        # Dropped by the server: the resume is up to date, so all it gets is synced.
        ctx = server.server.ctx
        for connection in [*ctx.other_connections, *ctx.connections]:
            transport = getattr(connection, "transport", None) or connection._transport
            transport.abort()
        again = await _next(stream)
        assert again == synced
        assert stream.connects == 2 and stream.position("gc:y") == (1, epoch)
        await client.gcounter_increment("gc:y", 1)
        delta = await _next(stream)
        assert (delta["kind"], delta["seq"]) == ("op", 2)
