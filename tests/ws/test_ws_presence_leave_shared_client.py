"""Two connections of one client (two tabs of one user, or a reconnect that
re-sent its presence before the server noticed the old socket was gone) share
one presence entry, keyed by the token's client_id. The ``leave`` a closed
connection is owed (docs/protocol.md "The WebSocket") removes the entry only
when that connection wrote it last.

Before, the first tab's close removed the entry the second tab had written
since, though the second tab was still connected.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from syncd.ws.connection import wait_background
from tests.conftest import ADMIN, RunningServer
from tests.store.pgnodes import eventually, pg_db, pg_url, schema
from tests.ws.support import mint, op, open_ws

__all__ = ["pg_db", "pg_url", "schema"]  # the fixtures the PostgreSQL test uses

HEADERS = {"Authorization": f"Bearer {ADMIN}"}
CID = 9


async def _settled() -> None:
    """The closed connection's disconnect ops have run (or were skipped)."""
    await asyncio.sleep(0.05)
    await wait_background(5.0)


async def _value(http: httpx.AsyncClient, crdt_id: str) -> Any:
    got = await http.get(f"/v1/namespaces/demo/crdts/{crdt_id}")
    assert got.status_code == 200
    return got.json()["value"]


async def test_closing_a_tab_keeps_the_entry_another_tab_wrote_since(
    server: RunningServer,
) -> None:
    token = mint(client_id=CID)
    async with (
        httpx.AsyncClient(base_url=server.url, headers=HEADERS) as http,
        open_ws(server, token) as b,
    ):
        async with open_ws(server, token) as a:
            await op(a, "pr:two", {"op": "update", "data": {"tab": "a"}})
            await op(b, "pr:two", {"op": "update", "data": {"tab": "b"}})
            assert await _value(http, "pr:two") == {str(CID): {"tab": "b"}}
        await _settled()
        assert await _value(http, "pr:two") == {str(CID): {"tab": "b"}}
        # B still owes its leave: its close removes the entry.
        await b.close()
        await _settled()
        assert await _value(http, "pr:two") == {}


async def test_a_lone_writer_leaves_when_it_closes(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers=HEADERS) as http:
        async with open_ws(server, mint(client_id=CID)) as a:
            await op(a, "pr:one", {"op": "update", "data": {"tab": "a"}})
            assert await _value(http, "pr:one") == {str(CID): {"tab": "a"}}
        await _settled()
        assert await _value(http, "pr:one") == {}


async def test_the_tab_that_wrote_last_takes_the_entry_with_it(server: RunningServer) -> None:
    """Documented behaviour: one entry per client, so B's leave removes it
    while A is still connected (a crashed tab's entry must not linger); A's
    next update with data brings it back."""
    token = mint(client_id=CID)
    async with (
        httpx.AsyncClient(base_url=server.url, headers=HEADERS) as http,
        open_ws(server, token) as a,
    ):
        async with open_ws(server, token) as b:
            await op(a, "pr:last", {"op": "update", "data": {"tab": "a"}})
            await op(b, "pr:last", {"op": "update", "data": {"tab": "b"}})
        await _settled()
        assert await _value(http, "pr:last") == {}
        await op(a, "pr:last", {"op": "update", "data": {"tab": "a"}})
        assert await _value(http, "pr:last") == {str(CID): {"tab": "a"}}


async def test_on_postgres_a_newer_write_on_another_node_keeps_the_entry(
    make_server: Any, pg_url: str
) -> None:
    """Across nodes the check is made where the leave is ordered: under the
    CRDT's lock, once node a has caught up with the rows. Here B's write on
    node b has not reached node a when A closes (node a holds the CRDT's
    lock meanwhile, as a notification still on its way would leave it
    behind); A's leave is refused once node a reads it, and B's entry stays.
    Before, the check read node a's memory first and A's leave removed it."""
    node_a: RunningServer = await make_server(database_url=pg_url, node_id="pr-a")
    node_b: RunningServer = await make_server(database_url=pg_url, node_id="pr-b")
    token = mint(client_id=CID)
    mine = {str(CID): {"tab": "b"}}
    key = ("demo", "pr:nodes")
    locks = node_a.app.store.locks  # type: ignore[attr-defined]
    async with (
        httpx.AsyncClient(base_url=node_b.url, headers=HEADERS) as http,
        open_ws(node_b, token) as b,
    ):
        async with open_ws(node_a, token) as a:
            await op(a, "pr:nodes", {"op": "update", "data": {"tab": "a"}})
            await locks.acquire(key)
            try:
                await op(b, "pr:nodes", {"op": "update", "data": {"tab": "b"}})
                await asyncio.sleep(0.2)  # node a heard of it: queued behind the lock
                held = node_a.app.engine.read(*key)
                assert held is not None and held["value"] == {str(CID): {"tab": "a"}}
            except BaseException:
                locks.release(key)
                raise
        await asyncio.sleep(0.3)  # A's leave waits for the lock
        locks.release(key)
        await _settled()
        assert await _value(http, "pr:nodes") == mine
        await eventually(lambda: (node_a.app.engine.read(*key) or {}).get("value") == mine)
