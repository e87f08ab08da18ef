"""A write PostgreSQL refuses with a unique or not-null violation is answered
503, whichever path the batch took. Those two are how an optimistic batch
learns that another node moved its rows, and it is done again under the row
locks; refused again there, the batch ended with the exception: none of its
requests was ever answered (and the node's later writes queued behind
nothing). A trigger stands in for the refusal (an operator's constraint, a
damaged table). In-process nodes on the suite's PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

from syncd.errors import ApiError
from tests.store.pgnodes import NS, StartNode, op, settled, sql_conn

pytestmark = pytest.mark.timeout(60)

ANSWER_WITHIN_S = 5.0


def refuse_as(url: str, condition: str) -> None:
    with sql_conn(url) as conn:
        conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN RAISE {condition}; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON ops FOR EACH ROW EXECUTE FUNCTION refuse()"
        )


def allow(url: str) -> None:
    with sql_conn(url) as conn:
        conn.execute("DROP TRIGGER refuse ON ops")
        conn.execute("DROP FUNCTION refuse()")


@pytest.mark.parametrize("condition", ["unique_violation", "not_null_violation"])
async def test_a_write_refused_by_a_constraint_is_answered_503(
    start_node: StartNode, pg_url: str, condition: str
) -> None:
    a = await start_node("a")
    await settled(a)
    await op(a, "gc:c", {"op": "increment", "amount": 1})
    refuse_as(pg_url, condition)
    for crdt_id in ("gc:c", "gc:new"):
        with pytest.raises(ApiError) as refused:
            await asyncio.wait_for(
                op(a, crdt_id, {"op": "increment", "amount": 1}), ANSWER_WITHIN_S
            )
        assert refused.value.status == 503
    allow(pg_url)
    # The node goes on: the next writes are taken, the refused ones are not there.
    for _ in range(100):
        try:
            await op(a, "gc:c", {"op": "increment", "amount": 1})
            break
        except ApiError as exc:
            assert exc.status == 503
            await asyncio.sleep(0.05)
    value = a.engine.read(NS, "gc:c")
    assert value is not None and value["value"] == 2
