"""A node frozen mid-transaction (SIGSTOP) holds row locks; on another node as
many requests wait for them as it has pooled connections (deletes of several
of its CRDTs at once, each on a connection of its own). Ending the frozen
session must not need a pooled connection: none is free until the waits end,
and they ended only at COMMIT_TIMEOUT_S, answered 503, the frozen session
left in place for the next ones. The stand-in for the frozen node is a
session that locks the rows and sends nothing more (as in
test_stalled_peer.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest

from tests.store.pgnodes import NS, StartNode, op

pytestmark = pytest.mark.timeout(60)

STALLED_PEER_S = 0.3
POOL_SIZE = 2
CRDTS = ("gc:h1", "gc:h2")


def frozen_holder(url: str) -> psycopg.Connection[Any]:
    """A session, as a node's would be mid-transaction, holding the CRDTs' row locks."""
    conn = psycopg.connect(url)
    conn.execute("SELECT 1 FROM crdts WHERE ns = %s AND id = ANY(%s) FOR UPDATE", (NS, list(CRDTS)))
    return conn


async def test_requests_filling_the_pool_behind_a_frozen_holder_wait_a_bounded_time(
    start_node: StartNode, pg_url: str
) -> None:
    a = await start_node(
        "a", pool_size=POOL_SIZE, commit_timeout_s=3.0, stalled_peer_s=STALLED_PEER_S
    )
    for crdt_id in CRDTS:
        assert (await op(a, crdt_id, {"op": "increment"})).seq == 1
    holder = frozen_holder(pg_url)
    try:
        started = time.monotonic()
        deleted = await asyncio.gather(*(a.service.delete(NS, c) for c in CRDTS))
        waited = time.monotonic() - started
        assert deleted == [True] * len(CRDTS)
        assert waited < 2.0
    finally:
        holder.close()
