"""Resuming on another node of a cluster (PostgreSQL): the client names the
seq it had from the node it wrote to, which this node may not have applied
yet (it follows the database a little behind). The database has those ops:
the client is up to date, not ahead of the server, and gets no snapshot older
than what it holds (its state went back, and ``synced`` named a seq before
its own acknowledged write)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.conftest import ADMIN, RunningServer
from tests.http.test_events import SseReader
from tests.store.pgnodes import pg_db, pg_url, schema

__all__ = ["pg_db", "pg_url", "schema"]  # the PostgreSQL fixtures

pytestmark = pytest.mark.timeout(60)

AUTH = {"authorization": f"Bearer {ADMIN}"}
PATH = "/v1/namespaces/app/crdts/gc:behind"


@pytest.fixture
def http_parser() -> str:
    return "h11"


async def _increment(client: httpx.AsyncClient) -> None:
    answer = await client.post(f"{PATH}/ops", json={"op": "increment"})
    assert answer.status_code == 200, answer.text


async def test_a_resume_on_a_node_behind_the_database_replays_from_it(
    make_server: Callable[..., Any], pg_url: str
) -> None:
    a: RunningServer = await make_server(database_url=pg_url, node_id="a")
    b: RunningServer = await make_server(database_url=pg_url, node_id="b")
    async with httpx.AsyncClient(base_url=a.url, headers=AUTH) as on_a:
        await _increment(on_a)
        sse, status, _ = await SseReader.open(b.port, f"{PATH}/events", AUTH)
        assert status == 200
        first = await sse.event()
        epoch = first["epoch"]
        assert first["seq"] == 1
        sse.close()
        # B holds the CRDT at seq 1 and follows A's ops; hold what it follows.
        service = b.app.service
        apply_remote = service.apply_remote
        held: list[dict[str, Any]] = []

        def hold(record: dict[str, Any]) -> bool:
            held.append(record)
            return True

        service.apply_remote = hold  # type: ignore[method-assign]
        await _increment(on_a)
        await _increment(on_a)
        entry = b.app.engine.get("app", "gc:behind")
        assert entry is not None and entry.seq == 1
        # The client has seq 3 (or 2) from A: up to date (or one op behind).
        for since, replayed in ((3, []), (2, [3])):
            sse, status, _ = await SseReader.open(
                b.port, f"{PATH}/events?since={since}&epoch={epoch}", AUTH
            )
            assert status == 200
            start = []
            while (named := await sse.named())[0] != "synced":
                start.append(named[1])
            assert [(d["kind"], d["seq"]) for d in start] == [("op", s) for s in replayed]
            assert (named[1]["seq"], named[1]["epoch"]) == (3, epoch)
            if since == 3:
                sse.close()
        # B catches up: what the stream has is not written again, what follows is.
        service.apply_remote = apply_remote  # type: ignore[method-assign]
        for record in held:
            apply_remote(record)
        await _increment(on_a)
        after = await sse.event()
        assert (after["kind"], after["seq"]) == ("op", 4)
        sse.close()
