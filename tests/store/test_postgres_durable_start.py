"""PostgreSQL: a subscriber starts from committed state, and a committed op
reaches this node's subscribers even when its request was cancelled.

The commit is the durability point. A batch applies its ops to memory under
each CRDT's lock, then commits: a snapshot taken in between would hold ops a
failed commit takes back (syncd/service.py, ``durable_state``). And a request
cancelled while its batch commits (its client went away) leaves the batch
going on: its ops are committed all the same, and their fan-out must happen.
In-process nodes on the suite's PostgreSQL (tests/store/pgnodes.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from syncd.catchup import initial_deltas
from tests.store.pgnodes import (
    NS,
    WAIT_S,
    Recorder,
    StartNode,
    allow_inserts,
    eventually,
    op,
    refuse_inserts,
)

pytestmark = pytest.mark.timeout(60)

UNDER_WAY_S = 0.5
"""How long a refused commit stays under way, its ops applied in memory, for
the tests to look at it (see ``refuse_inserts``)."""


async def _once(check: Callable[[], bool]) -> None:
    """Every loop step until ``check()``: catches a commit between apply and answer."""
    async with asyncio.timeout(WAIT_S):
        while not check():
            await asyncio.sleep(0)


def _at_seq(app: Any, crdt_id: str, seq: int) -> Callable[[], bool]:
    def reached() -> bool:
        entry = app.engine.get(NS, crdt_id)
        return entry is not None and entry.seq >= seq

    return reached


async def test_a_snapshot_is_never_of_an_op_whose_commit_then_fails(
    start_node: StartNode, pg_url: str
) -> None:
    a = await start_node("a")
    await op(a, "gc:s", {"op": "increment"})
    refuse_inserts(pg_url, after_s=UNDER_WAY_S)
    failing: asyncio.Task[Any] = asyncio.create_task(
        op(a, "gc:s", {"op": "increment", "amount": 100})
    )
    await _once(_at_seq(a, "gc:s", 2))  # applied in memory, its commit under way
    start = await initial_deltas(a.service, NS, "gc:s", None, None)
    with pytest.raises(Exception, match="unavailable"):
        await failing
    assert [(d["kind"], d["seq"]) for d in start] == [("snapshot", 1)]
    allow_inserts(pg_url)
    assert (await op(a, "gc:s", {"op": "increment"})).seq == 2


async def test_up_to_date_is_never_at_a_seq_being_committed(
    start_node: StartNode, pg_url: str
) -> None:
    a = await start_node("a")
    await op(a, "gc:u", {"op": "increment"})
    epoch = a.engine.get(NS, "gc:u").epoch  # type: ignore[union-attr]
    refuse_inserts(pg_url, after_s=UNDER_WAY_S)
    failing: asyncio.Task[Any] = asyncio.create_task(
        op(a, "gc:u", {"op": "increment", "amount": 100})
    )
    await _once(_at_seq(a, "gc:u", 2))
    start = await initial_deltas(a.service, NS, "gc:u", 2, epoch)
    with contextlib.suppress(Exception):
        await failing
    assert [(d["kind"], d["seq"]) for d in start] == [("snapshot", 1)]  # not [] (up to date)


async def _cancel_once(work: Coroutine[Any, Any, Any], applied: Callable[[], bool]) -> None:
    task = asyncio.create_task(work)
    await _once(applied)
    assert not task.done()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_a_cancelled_op_reaches_subscribers(start_node: StartNode) -> None:
    a = await start_node("a")
    rec = Recorder(a, "gc:c")
    await op(a, "gc:c", {"op": "increment"})
    await _cancel_once(op(a, "gc:c", {"op": "increment", "amount": 5}), _at_seq(a, "gc:c", 2))
    await op(a, "gc:c", {"op": "increment"})
    await eventually(lambda: rec.op_seqs()[-1:] == [3])
    assert rec.op_seqs() == [1, 2, 3]


async def test_a_cancelled_delete_reaches_subscribers(start_node: StartNode) -> None:
    a = await start_node("a")
    rec = Recorder(a, "gc:d")
    await op(a, "gc:d", {"op": "increment"})
    # Cancelled once under way: the CRDT stays in memory until its row is
    # ended (the store drops it then, under the CRDT's lock).
    await _cancel_once(
        a.service.delete(NS, "gc:d"), lambda: (NS, "gc:d") in a.service.residency.deleting
    )
    await op(a, "gc:d", {"op": "increment"})
    await eventually(lambda: len(rec.deltas) == 3)
    assert [(d["kind"], d.get("seq")) for d in rec.deltas] == [
        ("op", 1),
        ("deleted", None),
        ("op", 1),
    ]
