"""In-process syncd nodes on the suite's PostgreSQL (a database per test module,
a schema per test), driven through the service: the op path HTTP and
WebSocket share. The fixtures are registered in this package's conftest."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from syncd.app import App
from syncd.auth.authenticator import ROOT
from syncd.hub import DeliverEach, EncodedDelta
from tests.cluster.pgdb import database_url, fresh_database
from tests.conftest import base_settings

NS = "n"
WAIT_S = 10.0


@pytest.fixture(scope="module")
def pg_db() -> Iterator[str]:
    with fresh_database() as name:
        yield name


@pytest.fixture
def schema(pg_db: str) -> str:
    name = "s_" + secrets.token_hex(4)
    with psycopg.connect(database_url(pg_db), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    return name


@pytest.fixture
def pg_url(pg_db: str, schema: str) -> str:
    return f"{database_url(pg_db)}?options=-csearch_path%3D{schema}"


def sql_conn(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


def refuse_inserts(url: str, after_s: float = 0.0) -> None:
    """Make every insert into ``ops`` fail (a trigger): commits fail after
    apply(), ``after_s`` seconds into the insert (a test that must see the
    commit under way, its ops applied in memory, gets that long to look:
    a refusal at once could be undone before the test's next loop step on a
    loaded machine)."""
    with sql_conn(url) as conn:
        conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN PERFORM pg_sleep({float(after_s)!r}); RAISE EXCEPTION 'refused'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON ops FOR EACH ROW EXECUTE FUNCTION refuse()"
        )


def allow_inserts(url: str) -> None:
    with sql_conn(url) as conn:
        conn.execute("DROP TRIGGER refuse ON ops")


StartNode = Callable[..., Awaitable[App]]


@pytest.fixture
async def start_node(tmp_path: Path, pg_url: str) -> AsyncIterator[StartNode]:
    apps: list[App] = []

    async def start(node_id: str = "a", url: str | None = None, **store_kwargs: Any) -> App:
        settings = base_settings(
            tmp_path / node_id,
            database_url=url or pg_url,
            node_id=node_id,
            **store_kwargs.pop("settings", {}),
        )
        app = App(settings, store_options=store_kwargs)
        await app.start()
        apps.append(app)
        return app

    yield start
    for app in apps:
        await app.close()


async def op(app: App, crdt_id: str, body: Any) -> Any:
    return await app.service.apply_ops(NS, crdt_id, body, ROOT, "http")


async def eventually(check: Callable[[], bool], timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


async def until_waiting_for_lock(
    watcher: psycopg.Connection[Any],
    query_like: str,
    task: asyncio.Future[Any],
    what: str,
    timeout: float = 3 * WAIT_S,
) -> None:
    """Return once another session runs a statement like ``query_like`` (a SQL
    LIKE pattern) and waits for a lock; ``task``, which sent it, must still be
    waiting then (``what`` it waits for names the failure)."""
    deadline = time.monotonic() + timeout
    while True:
        found = watcher.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND query LIKE %s AND pid <> pg_backend_pid()",
            (query_like,),
        ).fetchone()
        if found is not None and found[0] > 0:
            return
        assert not task.done(), f"it did not wait for {what}"
        assert time.monotonic() < deadline, f"it never reached {what}"
        await asyncio.sleep(0.01)


async def settled(app: App) -> None:
    """Wait for the node's first catch-up (after its listener connected) to finish."""
    cluster = app.cluster
    assert cluster is not None

    def done() -> bool:
        task = cluster._catching_up
        return cluster.stats.catch_ups >= 1 and task is not None and task.done()

    await eventually(done)


async def load(app: App, *crdt_ids: str) -> None:
    """Make ``app`` hold these CRDTs: a node reads a CRDT when it is first used,
    and from then on follows what other nodes write to it."""
    for crdt_id in crdt_ids:
        await app.service.ensure(NS, crdt_id)


def full(app: App, crdt_id: str) -> dict[str, Any] | None:
    return app.engine.read(NS, crdt_id, full=True)


class Recorder(DeliverEach):
    """A hub subscriber that keeps every delta it is handed."""

    def __init__(self, app: App, crdt_id: str) -> None:
        self.deltas: list[dict[str, Any]] = []
        app.hub.subscribe(NS, crdt_id, self)

    def deliver(self, delta: EncodedDelta) -> None:
        self.deltas.append(delta.delta)

    def op_seqs(self) -> list[int]:
        return [d["seq"] for d in self.deltas if d["kind"] == "op"]
