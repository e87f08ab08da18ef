"""A node takes writes again as soon as it can after losing PostgreSQL: after
a long outage (its database refusing connections, which disturbs no other
database on the suite's server), and after its pooled connections were ended
under it. In-process nodes."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from syncd.errors import ApiError
from tests.cluster.pgdb import set_connections_allowed
from tests.store.pgnodes import NS, StartNode, eventually, op, sql_conn

pytestmark = pytest.mark.timeout(60)

OUTAGE_S = 3.2
"""Long enough for the pool's own reconnect attempts (psycopg_pool backs off
1, 2, 4 s ...) to have their next one scheduled seconds after the node's
listener (which backs off up to 2 s) finds the server again."""


async def test_writes_are_taken_as_soon_as_the_node_is_ready_after_a_long_outage(
    start_node: StartNode, pg_db: str
) -> None:
    a = await start_node("a")
    await op(a, "gc:o", {"op": "increment"})
    set_connections_allowed(pg_db, False)
    try:
        await eventually(lambda: not a.ready, timeout=5)
        # A read meanwhile (a client loading a CRDT, listing): the pool starts
        # connecting, and backs off while the server is away.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(a.store.list_ids(NS, "", None, 10), 0.2)
        await asyncio.sleep(OUTAGE_S)
    finally:
        set_connections_allowed(pg_db, True)
    await eventually(lambda: a.ready)
    started = time.monotonic()
    # It waited for the pool's next attempt (about 2 s here, the length of the
    # outage in general), or answered 503 after the pool's 4 s.
    result = await op(a, "gc:o", {"op": "increment"})
    assert result.seq == 2
    assert time.monotonic() - started < 1.0


def _pooled_backends(url: str) -> list[int]:
    """The node's pooled connections: every session on its database but the
    listener's (its probe) and the revocation poller's."""
    own = ("SELECT coalesce(max(gid), 0) FROM ops", "SELECT version FROM revocations_version")
    with sql_conn(url) as conn:
        rows = conn.execute(
            "SELECT pid, query FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return [int(pid) for pid, query in rows if query not in own]


async def test_a_dead_pooled_connection_costs_one_request_not_one_each(
    start_node: StartNode, pg_url: str
) -> None:
    a = await start_node("a")
    # Several pooled connections, idle, then ended by the server (as an
    # idle_session_timeout, an administrator or a proxy would), the node's
    # listener untouched.
    await asyncio.gather(*(op(a, f"gc:{i}", {"op": "increment"}) for i in range(40)))
    pids = _pooled_backends(pg_url)
    assert len(pids) >= 3
    with sql_conn(pg_url) as conn:
        for pid in pids:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    # The first request to use one fails (503). Those after it do not: before,
    # each load of a CRDT (as here), read of the history, list ... took the
    # next dead one and failed. (A batch of ops already retried once on a
    # fresh connection after checking the pool.)
    answers = []
    for _ in range(len(pids) + 1):
        await eventually(lambda: a.ready)
        try:
            answers.append((await op(a, "gc:new", {"op": "increment"})).seq)
        except ApiError as exc:
            answers.append(exc.status)  # each dead connection in turn, before
    ok = [answer for answer in answers if answer != 503]
    assert ok == list(range(1, len(ok) + 1)), answers
    assert len(ok) >= len(pids), answers
