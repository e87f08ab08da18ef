"""``subscribe(ids)`` takes a list of ids: given one id as a string, it
subscribed to each of its characters ('g', 'c', ':', 'x') and never showed
the CRDT meant. It refuses a string (TypeError) before connecting, async and
blocking; a list still works, against the real server."""

from __future__ import annotations

import asyncio

import pytest

from syncd.client import AsyncClient, Client
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer


async def test_a_string_of_ids_is_refused(server: RunningServer) -> None:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        await client.gcounter_increment("gc:x")
        with pytest.raises(TypeError, match="list"):
            client.subscribe("gc:x")
        async with client.subscribe(["gc:x"]) as deltas:
            async for delta in deltas:
                assert delta["id"] == "gc:x" and delta["kind"] == "snapshot"
                break

    def blocking() -> None:
        with Client(server.url, make_token(4), NS) as client:
            with pytest.raises(TypeError, match="list"):
                client.subscribe("gc:x")
            with client.subscribe(["gc:x"]) as stream:
                assert stream.next(timeout=5)["id"] == "gc:x"

    await asyncio.to_thread(blocking)
