"""A creation refused under the CRDT's row lock (the namespace's CRDT quota,
checked in apply()) leaves no row behind: a batch locks every CRDT it
touches with a placeholder row for a new one, and when another request of
the batch committed, the placeholders of the refused creations were
committed with it, a row for ever for each refused attempt (a client
retrying new ids at its quota grew the table without bound). In-process
node."""

from __future__ import annotations

import asyncio

from syncd.errors import ApiError
from tests.store.pgnodes import StartNode, op, sql_conn

ATTEMPTS = 5
ROUNDS = 10


async def test_refused_creations_in_a_committed_batch_leave_no_rows(
    start_node: StartNode, pg_url: str
) -> None:
    a = await start_node("a", settings={"namespace_max_crdts": 1})
    await op(a, "gc:a", {"op": "increment"})
    refused = 0
    for round_ in range(ROUNDS):
        answers = await asyncio.gather(
            op(a, "gc:a", {"op": "increment"}),
            *(op(a, f"gc:new{round_}-{i}", {"op": "increment"}) for i in range(ATTEMPTS)),
            return_exceptions=True,
        )
        assert not isinstance(answers[0], BaseException)
        for answer in answers[1:]:
            assert isinstance(answer, ApiError) and answer.code == "quota_exceeded"
            refused += 1
    assert refused == ROUNDS * ATTEMPTS
    with sql_conn(pg_url) as conn:
        rows = conn.execute("SELECT id FROM crdts ORDER BY id").fetchall()
    assert rows == [("gc:a",)]
    assert (await op(a, "gc:a", {"op": "increment"})).seq == ROUNDS + 2
