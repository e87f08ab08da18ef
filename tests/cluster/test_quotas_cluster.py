"""Namespace quotas on PostgreSQL (docs/operations.md#quotas): one node holds
SERVICE_NAMESPACE_MAX_CRDTS exactly, however many creations one group commit
carries; other nodes learn of them within a usage refresh."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from syncd.store.postgres import USAGE_REFRESH_S
from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS

pytestmark = pytest.mark.timeout(120)

NS = "app"
MAX_CRDTS = 3
CREATIONS = 20
ROUNDS = 5
DELETE_AFTER_S = 0.003
"""The delete is sent a moment after the creations: they are past their usage
read, and wait for their batch, while it commits."""


@pytest.fixture
def http_parser() -> str:
    """One parser: the store is what is tested here, not the parsers."""
    return "h11"


async def _create(http: httpx.AsyncClient, crdt_id: str) -> int:
    r = await http.post(f"/v1/namespaces/{NS}/crdts/{crdt_id}/ops", json={"op": "increment"})
    if r.status_code == 403:
        assert r.json()["error"] == "quota_exceeded", r.text
    return r.status_code


async def _live(http: httpx.AsyncClient) -> int:
    r = await http.get(f"/v1/namespaces/{NS}/usage")
    return int(r.json()["crdts"])


async def test_creations_in_one_batch_stop_at_the_namespace_limit(
    make_server: Callable[..., Any], pg_url: str
) -> None:
    """Each creation was checked against the figure of before the batch (a
    creation was counted only once written): 20 at once made 20 CRDTs where
    3 were allowed."""
    server: RunningServer = await make_server(
        database_url=pg_url, node_id="q-a", namespace_max_crdts=MAX_CRDTS
    )
    async with httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS) as http:
        statuses = await asyncio.gather(*(_create(http, f"gc:{i}") for i in range(CREATIONS)))
        assert sorted(statuses) == [200] * MAX_CRDTS + [403] * (CREATIONS - MAX_CRDTS)
        assert await _live(http) == MAX_CRDTS
        # The CRDTs made still take ops, in batches with a refused creation too.
        created = [f"gc:{i}" for i, status in enumerate(statuses) if status == 200]
        again = await asyncio.gather(
            *(_create(http, crdt_id) for crdt_id in [*created, "gc:new"] * 3)
        )
        assert sorted(again) == [200] * (3 * MAX_CRDTS) + [403] * 3


async def test_another_node_refuses_within_a_usage_refresh(
    make_server: Callable[..., Any], pg_url: str
) -> None:
    a: RunningServer = await make_server(
        database_url=pg_url, node_id="q-a", namespace_max_crdts=MAX_CRDTS
    )
    b: RunningServer = await make_server(
        database_url=pg_url, node_id="q-b", namespace_max_crdts=MAX_CRDTS
    )
    async with (
        httpx.AsyncClient(base_url=a.url, headers=ADMIN_HEADERS) as on_a,
        httpx.AsyncClient(base_url=b.url, headers=ADMIN_HEADERS) as on_b,
    ):
        assert await _live(on_b) == 0  # node B holds the namespace's figures now
        for i in range(MAX_CRDTS):
            assert await _create(on_a, f"gc:{i}") == 200
        await asyncio.sleep(USAGE_REFRESH_S + 0.1)
        assert await _create(on_b, "gc:b") == 403


async def test_creations_racing_a_delete_stop_at_the_namespace_limit(
    make_server: Callable[..., Any], pg_url: str
) -> None:
    """A delete forgot the namespace's figures: creations already past their
    usage read were then checked against none at all, and all of them passed.
    And the read that follows a delete missed the creations of a batch in
    flight meanwhile: one more passed."""
    server: RunningServer = await make_server(
        database_url=pg_url, node_id="q-a", namespace_max_crdts=MAX_CRDTS
    )
    async with httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS) as http:
        held = [f"gc:{i}" for i in range(MAX_CRDTS)]
        for crdt_id in held:
            assert await _create(http, crdt_id) == 200

        async def delete(crdt_id: str) -> None:
            await asyncio.sleep(DELETE_AFTER_S)  # while the creations are on their way
            r = await http.delete(f"/v1/namespaces/{NS}/crdts/{crdt_id}")
            assert r.status_code == 204, r.text

        for round_ in range(ROUNDS):
            creations = [f"gc:r{round_}-{i}" for i in range(CREATIONS)]
            _, *statuses = await asyncio.gather(
                delete(held.pop(0)), *(_create(http, crdt_id) for crdt_id in creations)
            )
            held += [crdt_id for crdt_id, s in zip(creations, statuses, strict=True) if s == 200]
            assert len(held) <= MAX_CRDTS, f"round {round_}: {statuses}"
            assert await _live(http) == len(held)
