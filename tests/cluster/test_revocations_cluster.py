"""Revocations on PostgreSQL: two nodes of a cluster on the suite's throw-away
server (real HTTP, SSE and WebSocket), and the table across restarts
(docs/permissions.md#revoking-tokens)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
import websockets

from syncd.auth.revocations import MAX_REVOCATIONS_PER_NAMESPACE, Revocation
from syncd.auth.revocations_pg import POLL_INTERVAL_S, PgRevocationStore
from syncd.store.pg_pool import PgPool
from syncd.store.pg_schema import migrate
from syncd.ws.framing import CLOSE_TOKEN_EXPIRED
from tests.cluster.pgdb import database_url, set_connections_allowed
from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS, issue
from tests.http.test_events import SseReader
from tests.store.pgnodes import sql_conn
from tests.ws.support import recv, recv_kind, send_mp

pytestmark = pytest.mark.timeout(120)

END_WITHIN_S = 1.0
"""What docs/permissions.md promises: every node refuses a revoked token, and
ends what it holds open, within a second."""

NS = "app"
AWAY_LOGGED_WITHIN_S = 10.0
DEADLOCK_ROUNDS = 10
CLIENTS = 8
"""A checkout of the pool gives up after connect_timeout (1 s here) plus a second."""
REVOKED = {"error": "token_revoked", "message": "token revoked"}

Start = Callable[..., Awaitable[RunningServer]]


@pytest.fixture
def http_parser() -> str:
    """One parser: the cluster is what is tested here, not the parsers."""
    return "h11"


@pytest.fixture
def start(make_server: Callable[..., Any], pg_url: str) -> Start:
    async def node(node_id: str) -> RunningServer:
        server: RunningServer = await make_server(database_url=pg_url, node_id=node_id)
        return server

    return node


async def _within(check: Callable[[], Awaitable[bool]], limit_s: float) -> float:
    """Seconds until ``check`` holds; fails past ``limit_s``."""
    started = time.monotonic()
    while not await check():
        elapsed = time.monotonic() - started
        assert elapsed < limit_s, f"not within {limit_s} s"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


async def _me_status(client: httpx.AsyncClient, headers: dict[str, str]) -> int:
    r = await client.get(f"/v1/namespaces/{NS}/tokens/me", headers=headers)
    return r.status_code


def test_the_poll_interval_keeps_the_promise() -> None:
    assert POLL_INTERVAL_S <= 0.5


async def test_a_revocation_on_one_node_ends_the_clients_streams_on_the_other(
    start: Start,
) -> None:
    a, b = await start("rev-a"), await start("rev-b")
    async with (
        httpx.AsyncClient(base_url=a.url) as on_a,
        httpx.AsyncClient(base_url=b.url) as on_b,
    ):
        token = await issue(on_a, NS, client_id=7)
        other = await issue(on_a, NS, client_id=8)
        assert await _me_status(on_b, token) == 200  # the same key on both nodes

        # On node B: an event stream and a WebSocket subscription of client 7.
        sse, status, _ = await SseReader.open(
            b.port, f"/v1/namespaces/{NS}/crdts/gc:c/events", token
        )
        assert status == 200 and (await sse.event())["kind"] == "snapshot"
        bearer = token["authorization"].removeprefix("Bearer ")
        ws = await websockets.connect(
            f"ws://127.0.0.1:{b.port}/v1/namespaces/{NS}/ws?token={bearer}"
        )
        await send_mp(ws, {"kind": "subscribe", "id": "gc:c"})
        await recv_kind(ws, "snapshot")

        r = await on_a.post(
            f"/v1/namespaces/{NS}/revocations", json={"client_id": 7}, headers=ADMIN_HEADERS
        )
        assert r.status_code == 200
        revocation = r.json()
        answered = time.monotonic()
        assert await _me_status(on_a, token) == 401  # at once on the node that revoked

        async def refused_on_b() -> bool:
            return await _me_status(on_b, token) == 401

        await _within(refused_on_b, END_WITHIN_S)
        r = await on_b.get(f"/v1/namespaces/{NS}/crdts/gc:c", headers=token)
        assert r.json() == REVOKED
        # Node B's streams ended, within the same second.
        assert await sse.end_event(timeout=END_WITHIN_S) == REVOKED
        error = await asyncio.wait_for(recv(ws), END_WITHIN_S)
        assert (error["kind"], error["id"], error["error"]) == ("error", "gc:c", "token_revoked")
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), END_WITHIN_S)
        assert ws.close_code == CLOSE_TOKEN_EXPIRED
        assert time.monotonic() - answered < END_WITHIN_S
        assert await _me_status(on_b, other) == 200  # another client is untouched

        # Node B lists it, and lifting it there lets the token in on node A again.
        r = await on_b.get(f"/v1/namespaces/{NS}/revocations", headers=ADMIN_HEADERS)
        assert r.json() == {"revocations": [revocation]}
        r = await on_b.delete(f"/v1/namespaces/{NS}/revocations/7", headers=ADMIN_HEADERS)
        assert r.status_code == 204

        async def accepted_on_a() -> bool:
            return await _me_status(on_a, token) == 200

        await _within(accepted_on_a, END_WITHIN_S)
        r = await on_a.get(f"/v1/namespaces/{NS}/revocations", headers=ADMIN_HEADERS)
        assert r.json() == {"revocations": []}


async def test_revocations_are_kept_in_the_database(start: Start, pg_url: str) -> None:
    a = await start("keep-a")
    async with httpx.AsyncClient(base_url=a.url) as on_a:
        token = await issue(on_a, NS, client_id=7)
        r = await on_a.post(
            f"/v1/namespaces/{NS}/revocations",
            json={"client_id": 7, "before_ms": time.time_ns() // 1_000_000 + 60_000},
            headers=ADMIN_HEADERS,
        )
        revocation = r.json()
    await a.server.shutdown()
    with sql_conn(pg_url) as conn:
        rows = conn.execute("SELECT ns, client_id, before_ms FROM revocations").fetchall()
        assert rows == [(NS, 7, revocation["before_ms"])]
        (version,) = conn.execute("SELECT version FROM revocations_version").fetchone() or (0,)
        assert version == 1

    # A node started afterwards (a restart, or a new node) refuses the token from the start.
    b = await start("keep-b")
    async with httpx.AsyncClient(base_url=b.url) as on_b:
        assert await _me_status(on_b, token) == 401
        r = await on_b.get(f"/v1/namespaces/{NS}/revocations", headers=ADMIN_HEADERS)
        assert r.json() == {"revocations": [revocation]}
        # Revoking the same client again replaces the row (still one, version 2).
        r = await on_b.post(
            f"/v1/namespaces/{NS}/revocations", json={"client_id": 7}, headers=ADMIN_HEADERS
        )
        assert r.status_code == 200
    with sql_conn(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM revocations").fetchone() == (1,)
        assert conn.execute("SELECT version FROM revocations_version").fetchone() == (2,)


async def test_nodes_revoking_at_once_stop_at_the_namespace_limit(
    start: Start, pg_url: str
) -> None:
    """Each node checked the limit against its own copy of the table: two nodes
    revoking at once for the last place both took it. The database decides."""
    a = await start("lim-a")  # makes the tables
    with sql_conn(pg_url) as conn:
        conn.execute(
            "INSERT INTO revocations (ns, client_id, before_ms, revoked_at)"
            " SELECT %s, n, 1, 1 FROM generate_series(1, %s) AS n",
            (NS, MAX_REVOCATIONS_PER_NAMESPACE - 1),
        )
        conn.execute("UPDATE revocations_version SET version = version + 1")
    b = await start("lim-b")

    async def a_has_read_them() -> bool:
        return a.app.revocations.table.count(NS) == MAX_REVOCATIONS_PER_NAMESPACE - 1

    await _within(a_has_read_them, END_WITHIN_S)
    first = MAX_REVOCATIONS_PER_NAMESPACE
    async with (
        httpx.AsyncClient(base_url=a.url) as on_a,
        httpx.AsyncClient(base_url=b.url) as on_b,
    ):

        async def revoke(http: httpx.AsyncClient, client_id: int) -> int:
            r = await http.post(
                f"/v1/namespaces/{NS}/revocations",
                json={"client_id": client_id},
                headers=ADMIN_HEADERS,
            )
            assert r.status_code in (200, 409), r.text
            if r.status_code == 409:
                assert r.json()["error"] == "too_many_revocations"
            return r.status_code

        statuses = await asyncio.gather(
            *(revoke(http, first + i) for i, http in enumerate([on_a, on_b] * 3))
        )
        assert sorted(statuses) == [200] + [409] * 5
        # Revoking a client already revoked replaces its row: allowed at the limit.
        assert await revoke(on_b, 1) == 200
    with sql_conn(pg_url) as conn:
        count = conn.execute("SELECT count(*) FROM revocations WHERE ns = %s", (NS,)).fetchone()
        assert count == (MAX_REVOCATIONS_PER_NAMESPACE,)


async def test_the_first_read_waits_for_a_database_that_is_away(
    cluster_db: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The database went away between the store's open and the revocations'
    first read (or was slow to answer it): that read failed the start instead
    of waiting, as the store's open does, for the database to be back."""
    url = database_url(cluster_db)
    with sql_conn(url) as conn:
        conn.execute("SELECT 1")  # the database exists and answers
    migrating = PgPool(url, 1)
    conn = await migrating.connect()
    await migrate(conn)
    await conn.close()
    await migrating.close()

    pool = PgPool(url, 1, connect_timeout_s=1)
    store = PgRevocationStore(pool)
    applied: list[list[Revocation]] = []
    set_connections_allowed(cluster_db, False)
    try:
        opening = asyncio.get_running_loop().create_task(store.open(applied.append))
        deadline = time.monotonic() + AWAY_LOGGED_WITHIN_S
        while "waiting for PostgreSQL (DATABASE_URL)" not in caplog.text:
            assert not opening.done(), opening.exception()
            assert time.monotonic() < deadline, caplog.text
            await asyncio.sleep(0.05)
    finally:
        set_connections_allowed(cluster_db, True)
    try:
        await asyncio.wait_for(opening, AWAY_LOGGED_WITHIN_S)
        assert applied == [[]]
    finally:
        await store.close()
        await pool.close()


async def test_revoking_and_lifting_at_once_on_two_nodes_never_deadlock(start: Start) -> None:
    """Every change locks the version row first: a revocation (which counts the
    namespace under that lock) and a lift of the same client on another node
    took the two rows in opposite orders, and PostgreSQL ended one as a deadlock."""
    a, b = await start("dl-a"), await start("dl-b")
    async with (
        httpx.AsyncClient(base_url=a.url, headers=ADMIN_HEADERS) as on_a,
        httpx.AsyncClient(base_url=b.url, headers=ADMIN_HEADERS) as on_b,
    ):
        path = f"/v1/namespaces/{NS}/revocations"
        for _ in range(DEADLOCK_ROUNDS):
            answers = await asyncio.gather(
                *(on_a.post(path, json={"client_id": c}) for c in range(CLIENTS)),
                *(on_b.delete(f"{path}/{c}") for c in range(CLIENTS)),
            )
            assert {r.status_code for r in answers} <= {200, 204, 404}, [
                r.text for r in answers if r.status_code >= 500
            ]
