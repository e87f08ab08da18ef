"""On PostgreSQL too, ``GET`` of a CRDT shows only committed ops: a node applies
an op in memory under the CRDT's lock and then commits it, so a read answered
from memory meanwhile showed an op whose commit may yet fail. A real server on
a schema of its own; the commit is held by a trigger that waits for an advisory
lock the test holds, and fails when the test says.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from syncd.app import App
from syncd.server import Server
from tests.conftest import RunningServer, base_settings
from tests.store.pgnodes import pg_db, pg_url, schema, sql_conn
from tests.ws.support import NS, mint, wait_for

__all__ = ["pg_db", "pg_url", "schema"]  # the PostgreSQL fixtures

pytestmark = pytest.mark.timeout(60)

QUIET_S = 0.3
LOCK = 4242
COUNTER = "gc:read"


def _hold_commits(url: str) -> None:
    """Every insert into ``ops`` waits for advisory lock :data:`LOCK`, then
    fails if ``gate.fail`` is set."""
    with sql_conn(url) as conn:
        conn.execute("CREATE TABLE gate (fail boolean NOT NULL)")
        conn.execute("INSERT INTO gate VALUES (false)")
        conn.execute(
            "CREATE FUNCTION held() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            f" PERFORM pg_advisory_xact_lock({LOCK});"
            " IF (SELECT fail FROM gate) THEN RAISE EXCEPTION 'refused'; END IF;"
            " RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER held BEFORE INSERT ON ops FOR EACH ROW EXECUTE FUNCTION held()"
        )


@pytest.mark.parametrize("fails", [False, True])
async def test_a_get_shows_an_op_only_once_committed(
    tmp_path: Path, pg_url: str, fails: bool
) -> None:
    config = base_settings(tmp_path / "node", database_url=pg_url, node_id="a")
    app = App(config)
    server = Server(config, app)
    await server.start()
    try:
        running = RunningServer(server)
        async with httpx.AsyncClient(
            base_url=running.url, headers={"authorization": f"Bearer {mint()}"}
        ) as client:
            url = f"/v1/namespaces/{NS}/crdts/{COUNTER}"
            r = await client.post(url + "/ops", json={"op": "increment"})
            assert r.status_code == 200, r.text
            _hold_commits(pg_url)
            with sql_conn(pg_url) as holder:
                holder.execute(f"SELECT pg_advisory_lock({LOCK})")
                write = asyncio.create_task(
                    client.post(url + "/ops", json={"op": "increment", "amount": 5})
                )
                # Applied in memory, its commit waiting in the trigger.
                await wait_for(lambda: _seq(app) == 2)
                read = asyncio.create_task(client.get(url))
                await asyncio.sleep(QUIET_S)
                if read.done():
                    early: Any = read.result().json()
                    pytest.fail(f"answered before the commit: {early}")
                if fails:
                    holder.execute("UPDATE gate SET fail = true")
                holder.execute(f"SELECT pg_advisory_unlock({LOCK})")
                r = await write
                assert r.status_code == (503 if fails else 200), r.text
                r = await read
        assert r.status_code == 200, r.text
        assert (r.json()["value"], r.json()["seq"]) == ((1, 1) if fails else (6, 2)), r.json()
    finally:
        await server.shutdown()


def _seq(app: App) -> int:
    entry = app.engine.get(NS, COUNTER)
    return 0 if entry is None else entry.seq
