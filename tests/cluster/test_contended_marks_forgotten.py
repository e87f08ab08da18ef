"""A node remembers which CRDTs another node wrote lately (so that its next
batch on one waits for the row lock instead of losing an optimistic race),
but only for as long as that matters: every CRDT another node ever wrote
while this node held it stayed in that table for the process's life, a few
hundred bytes each outside the memory budget, on a node that follows a
large working set over days. In-process nodes on the suite's PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

from syncd.cluster.replicator import CONTENDED_S, PROBE_INTERVAL_S
from tests.store.pgnodes import NS, StartNode, eventually, load, op, settled

pytestmark = pytest.mark.timeout(60)

CRDTS = [f"gc:{i}" for i in range(200)]


async def test_crdts_written_elsewhere_are_not_remembered_past_the_contention_window(
    start_node: StartNode,
) -> None:
    a = await start_node("a")
    b = await start_node("b")
    await settled(a)
    await settled(b)
    await asyncio.gather(*(op(a, c, {"op": "increment", "amount": 1}) for c in CRDTS))
    await load(b, *CRDTS)
    await asyncio.gather(*(op(a, c, {"op": "increment", "amount": 1}) for c in CRDTS))
    assert b.cluster is not None
    await eventually(lambda: all(b.engine.read(NS, c)["value"] == 2 for c in CRDTS))  # type: ignore[index]
    assert len(b.cluster._remote_at) == len(CRDTS)  # contended for a moment: as designed
    await eventually(
        lambda: not b.cluster._remote_at,  # type: ignore[union-attr]
        timeout=CONTENDED_S + 3 * PROBE_INTERVAL_S + 2,
    )
    # Still contended right after another write, as before.
    await op(a, CRDTS[0], {"op": "increment", "amount": 1})
    await eventually(lambda: b.cluster.contended((NS, CRDTS[0])))  # type: ignore[union-attr]
