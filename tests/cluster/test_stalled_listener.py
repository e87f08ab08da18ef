"""A node frozen (SIGSTOP, a paused VM) stops reading its LISTEN connection;
its session then blocks sending it notifications, and PostgreSQL keeps every
notification since in its queue (8 GB by default), for every node: once it is
full, every commit that notifies fails, on every node. A node ends the
listening session of another node that has been stuck that way longer than
``stalled_listener_s`` (the frozen node reconnects and catches up when it
wakes). The stand-in for the frozen node is a session named as listeners are
that LISTENs on the channel and reads nothing."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from syncd.cluster.replicator import LISTENER_APPLICATION
from tests.store.pgnodes import StartNode, eventually, op, settled

pytestmark = pytest.mark.timeout(60)

STALLED_LISTENER_S = 0.5


def frozen_listener(url: str, channel: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(url, autocommit=True, application_name=LISTENER_APPLICATION)
    conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
    return conn


def gone(url: str, pid: int) -> bool:
    """Asked on another connection: a query on the frozen one would read it."""
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return found is None


async def test_a_frozen_nodes_listening_session_is_ended(
    start_node: StartNode, pg_url: str
) -> None:
    a = await start_node("a")
    await settled(a)
    cluster = a.cluster
    assert cluster is not None
    cluster._stalled_listener_s = STALLED_LISTENER_S
    cluster._listener_check_s = 0.2
    frozen = frozen_listener(pg_url, cluster.channel)
    try:
        # Enough notifications to fill its socket: its session blocks sending.
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "SELECT count(pg_notify(%s, repeat('x', 7000) || g))"
                " FROM generate_series(1, 3000) AS g",
                (cluster.channel,),
            )
        started = time.monotonic()
        pid = frozen.info.backend_pid
        await eventually(lambda: gone(pg_url, pid), timeout=10)
        assert time.monotonic() - started < 5
    finally:
        frozen.close()
    # The node's own listener is untouched: it still follows and writes.
    assert (await op(a, "gc:after", {"op": "increment"})).seq == 1
    assert a.ready
