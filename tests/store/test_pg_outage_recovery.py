"""A node takes writes as soon as it is ready again after a long outage of
PostgreSQL (an in-process node on the suite's server; the outage is its
database refusing connections, which disturbs no other database)."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from tests.cluster.pgdb import set_connections_allowed
from tests.store.pgnodes import NS, StartNode, eventually, op

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
