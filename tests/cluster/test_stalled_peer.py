"""A node frozen in the middle of a transaction (SIGSTOP, a frozen VM, a long
GC) holds its CRDTs' row locks while PostgreSQL waits for its next statement,
and nothing ends that wait: every other node's batch on one of those CRDTs
waited for it, and since a node commits one batch at a time, so did every
other write of those nodes, for as long as the freeze lasted (each batch
answered 503 after COMMIT_TIMEOUT_S, the next one waiting again).

A node that waits for a row lock now ends, after ``stalled_peer_s``, the
session of the same role that holds it while waiting that long for its own
client: its transaction rolls back (none of it was acknowledged) and the
waiting batch goes on. The stand-in for the frozen node here is a session
that locks the CRDT's row and sends nothing more."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from tests.store.pgnodes import NS, StartNode, op

STALLED_PEER_S = 0.3
"""The nodes' bound here (the default is STALLED_PEER_S in syncd.store.postgres)."""


def frozen_holder(url: str) -> psycopg.Connection[Any]:
    """A session, as a node's would be mid-transaction, holding gc:hot's row lock."""
    conn = psycopg.connect(url)
    conn.execute("SELECT 1 FROM crdts WHERE ns = 'n' AND id = 'gc:hot' FOR UPDATE")
    return conn


async def test_a_node_frozen_mid_transaction_holds_up_the_others_only_for_a_bounded_time(
    start_node: StartNode, pg_url: str
) -> None:
    a = await start_node("a", commit_timeout_s=3.0, stalled_peer_s=STALLED_PEER_S)
    assert (await op(a, "gc:hot", {"op": "increment"})).seq == 1
    holder = frozen_holder(pg_url)
    try:
        started = time.monotonic()
        answer = await op(a, "gc:hot", {"op": "increment"})
        waited = time.monotonic() - started
        assert answer.seq == 2
        assert STALLED_PEER_S <= waited < 2.0
        with pytest.raises(psycopg.OperationalError):
            holder.execute("SELECT 1")  # its session was ended
    finally:
        holder.close()
    # The node writes on.
    assert (await op(a, "gc:other", {"op": "increment"})).seq == 1


async def test_a_delete_waits_for_a_frozen_holder_only_for_a_bounded_time(
    start_node: StartNode, pg_url: str
) -> None:
    a = await start_node("a", commit_timeout_s=3.0, stalled_peer_s=STALLED_PEER_S)
    assert (await op(a, "gc:hot", {"op": "increment"})).seq == 1
    holder = frozen_holder(pg_url)
    try:
        started = time.monotonic()
        assert await a.service.delete(NS, "gc:hot")
        assert time.monotonic() - started < 2.0
    finally:
        holder.close()
    assert (await op(a, "gc:hot", {"op": "increment"})).seq == 1  # a new life


async def test_a_node_frozen_while_reading_a_large_answer_holds_up_the_others_only_briefly(
    start_node: StartNode, pg_url: str
) -> None:
    """Frozen while its session sends it a large answer (a snapshot read under
    the row locks): the session waits to write (ClientWrite), not to read,
    and was never ended; every batch on its CRDTs waited out its deadline."""
    a = await start_node("a", commit_timeout_s=3.0, stalled_peer_s=STALLED_PEER_S)
    assert (await op(a, "gc:hot", {"op": "increment"})).seq == 1
    holder = frozen_holder(pg_url)
    holder.pgconn.send_query(b"SELECT repeat('x', 50000000)")  # never read
    try:
        started = time.monotonic()
        answer = await op(a, "gc:hot", {"op": "increment"})
        assert answer.seq == 2
        assert time.monotonic() - started < 2.0
    finally:
        holder.close()
