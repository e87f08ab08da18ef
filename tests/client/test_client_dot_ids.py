"""CRDT ids ``.`` and ``..`` are valid (syncd.ids.CRDT_ID_RE) but are dot
segments of a URL path, which HTTP clients remove: ``GET …/crdts/.`` went to
``…/crdts/`` (the list), ``…/crdts/..`` to no route at all. The client must
address these CRDTs like any other, against the real server."""

from __future__ import annotations

import asyncio

import pytest

from syncd.client import AsyncClient, Client
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer


@pytest.mark.parametrize("crdt_id", [".", ".."])
async def test_dot_ids_are_crdts_like_any_other(server: RunningServer, crdt_id: str) -> None:
    async with AsyncClient(server.url, make_token(3, admin=True), NS) as client:
        assert await client.read(crdt_id) is None
        answer = await client.gcounter_increment(crdt_id, 2)
        assert answer["seq"] == 1
        view = await client.read(crdt_id)
        assert view is not None and view["id"] == crdt_id and view["value"] == 2
        history = await client.history(crdt_id)
        assert [change["seq"] for change in history["ops"]] == [1]
        listed = await client.list_crdts()
        assert [item["id"] for item in listed["crdts"]] == [crdt_id]
        await client.delete_crdt(crdt_id)
        assert await client.read(crdt_id) is None
    view = server.app.engine.read(NS, crdt_id)
    assert view is None

    def blocking() -> None:
        with Client(server.url, make_token(4), NS) as client:
            client.orset_add(crdt_id, "x")
            view = client.read(crdt_id)
            assert view is not None and view["id"] == crdt_id and view["value"] == ["x"]

    await asyncio.to_thread(blocking)


async def test_events_of_a_dot_id(server: RunningServer) -> None:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        await client.gcounter_increment("..", 5)
        async with client.events("..") as deltas:
            async for delta in deltas:
                assert delta["kind"] == "snapshot" and delta["id"] == ".."
                break
