"""PostgreSQL: a delete that waits for a write batch holding its CRDT's lock.

The write, ordered first, commits on the life it was applied to and the
delete then ends that life. Subscribers see each op of it once, then
``deleted``: the delete keeps the CRDT in memory until the store ends its
life under the lock (the store drops it there), so the batch ahead of it
does not read the life back from the rows and fan its ops out again.
In-process nodes on the suite's PostgreSQL (tests/store/pgnodes.py); the row
is held by another session so that the batch is under way when the delete
starts."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.store.pgnodes import (
    NS,
    Recorder,
    StartNode,
    eventually,
    load,
    op,
    sql_conn,
)

pytestmark = pytest.mark.timeout(60)


async def test_a_delete_behind_a_write_batch_fans_out_each_op_once(
    start_node: StartNode, pg_url: str
) -> None:
    a = await start_node("a")
    b = await start_node("b")
    key = (NS, "gc:r")
    await op(b, "gc:r", {"op": "increment"})
    await load(a, "gc:r")
    rec = Recorder(a, "gc:r")
    await op(b, "gc:r", {"op": "increment"})
    follower = a.store.follower  # type: ignore[attr-defined]
    # B's write reached A: A's next batch on it waits for the row lock and
    # brings the engine up to the row before it applies.
    await eventually(lambda: rec.op_seqs() == [2] and follower.contended(key))
    with sql_conn(pg_url) as holder:
        holder.execute("BEGIN")
        holder.execute("SELECT 1 FROM crdts WHERE ns = %s AND id = %s FOR UPDATE", key)
        write: asyncio.Task[Any] = asyncio.create_task(op(a, "gc:r", {"op": "increment"}))
        await eventually(lambda: a.store.locks.busy(key))  # type: ignore[attr-defined]
        await asyncio.sleep(0.2)  # the batch waits for the row
        delete = asyncio.create_task(a.service.delete(NS, "gc:r"))
        await asyncio.sleep(0.2)  # the delete waits for the batch
        assert not write.done() and not delete.done()
        holder.execute("COMMIT")
    assert (await write).seq == 3
    assert await delete
    await eventually(lambda: any(d["kind"] == "deleted" for d in rec.deltas))
    await asyncio.sleep(0.2)
    assert [(d["kind"], d.get("seq")) for d in rec.deltas] == [
        ("op", 2),
        ("op", 3),
        ("deleted", None),
    ]
    assert a.engine.get(NS, "gc:r") is None
    assert (await a.service.ensure(NS, "gc:r")) is None
