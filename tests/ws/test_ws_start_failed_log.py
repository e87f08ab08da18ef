"""A subscription whose start cannot read the CRDT is logged as what it is,
on a real server on PostgreSQL (where a CRDT is loaded on demand):

- the database away (a :class:`~syncd.errors.StoreUnavailable`, 503): one
  warning line with the reason, no stack trace; the service expects it, and
  every subscriber's start fails alike while it lasts;
- a stored copy with an op missing under its row (the node bringing it up
  meets a gap, :class:`~syncd.crdt.engine.GapError`): the stack trace is
  kept, as for anything that is no refusal: a bug or damage.

Either way the subscriber is answered an error and the connection goes on.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest

from syncd.crdt.engine import GapError
from tests.cluster.pgdb import set_connections_allowed
from tests.conftest import ADMIN, RunningServer
from tests.store.pgnodes import pg_db, pg_url, schema, sql_conn
from tests.ws.support import NS, open_ws, recv_kind, send_mp

__all__ = ["pg_db", "pg_url", "schema"]  # the fixtures this module uses

pytestmark = pytest.mark.timeout(60)

ANSWER_S = 15.0
"""Upper bound on the error's arrival: a load waits for the pool's next
connection attempt (seconds) before it fails."""


def _replay_records(caplog: pytest.LogCaptureFixture, crdt_id: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "syncd.ws" and r.getMessage().startswith(f"replay for {NS}/{crdt_id}")
    ]


async def _error(ws: Any) -> dict[str, Any]:
    return await asyncio.wait_for(recv_kind(ws, "error"), ANSWER_S)


async def test_the_database_away_is_one_line_without_a_stack_trace(
    make_server: Any, pg_url: str, pg_db: str, caplog: pytest.LogCaptureFixture
) -> None:
    server: RunningServer = await make_server(database_url=pg_url, node_id="ws-log-a")
    caplog.set_level(logging.INFO, logger="syncd.ws")
    async with open_ws(server, ADMIN) as ws:
        set_connections_allowed(pg_db, False)
        try:
            # Never loaded here: its start reads the store, which is away.
            await send_mp(ws, {"kind": "subscribe", "id": "gc:away"})
            error = await _error(ws)
        finally:
            set_connections_allowed(pg_db, True)
        assert (error["id"], error["error"]) == ("gc:away", "unavailable"), error
        (record,) = _replay_records(caplog, "gc:away")
        assert record.levelno == logging.WARNING
        assert record.exc_info is None
        assert record.getMessage() == (
            f"replay for {NS}/gc:away failed: 503 unavailable: {error['message']}"
        )
        # The connection goes on.
        await send_mp(ws, {"kind": "ping", "ref": "p"})
        assert await recv_kind(ws, "pong") == {"kind": "pong", "ref": "p"}


async def test_an_unexpected_failure_keeps_its_stack_trace(
    make_server: Any, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    writer: RunningServer = await make_server(database_url=pg_url, node_id="ws-log-w")
    async with httpx.AsyncClient(base_url=writer.url) as client:
        for _ in range(3):
            response = await client.post(
                f"/v1/namespaces/{NS}/crdts/gc:torn/ops",
                json={"op": "increment"},
                headers={"Authorization": f"Bearer {ADMIN}"},
            )
            assert response.status_code == 200, response.text
    # An op gone from under the row: seq 2 is missing.
    with sql_conn(pg_url) as conn:
        conn.execute("DELETE FROM ops WHERE ns = %s AND id = 'gc:torn' AND seq = 2", (NS,))
    # A node that never loaded it loads it for the subscriber.
    reader: RunningServer = await make_server(database_url=pg_url, node_id="ws-log-r")
    caplog.set_level(logging.INFO, logger="syncd.ws")
    async with open_ws(reader, ADMIN) as ws:
        await send_mp(ws, {"kind": "subscribe", "id": "gc:torn"})
        error = await _error(ws)
        assert (error["id"], error["error"]) == ("gc:torn", "unavailable"), error
        (record,) = _replay_records(caplog, "gc:torn")
        assert record.levelno == logging.ERROR
        assert record.exc_info is not None and record.exc_info[0] is GapError
