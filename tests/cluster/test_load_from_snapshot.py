"""A node that loads a CRDT (its first use, or again after an eviction)
starts from the CRDT's snapshot and applies only the ops after it, as
docs/operations.md says a load costs ("a read of one checkpoint and the ops
after it"). It replayed every op the table still held from seq 1 whenever
seq 1 was retained: up to 1,500 ops a load with the default retention
(snapshots every 500 ops, 1,000 ops kept behind), every op with a retention
by age; 8x the time of a load from the snapshot for a 1,400-op text.
In-process nodes on the suite's PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from syncd.app import App
from tests.store.pgnodes import NS, Recorder, StartNode, full, load, op, settled

pytestmark = pytest.mark.timeout(60)

EVERY = 100


def count_applied(app: App) -> list[dict[str, Any]]:
    """Every record the node's cluster layer hands its engine (the real calls, counted)."""
    seen: list[dict[str, Any]] = []
    service = app.service
    apply_remote, replay_quietly = service.apply_remote, service.replay_quietly

    def counted_apply(record: dict[str, Any]) -> bool:
        seen.append(record)
        return apply_remote(record)

    def counted_replay(record: dict[str, Any]) -> None:
        seen.append(record)
        replay_quietly(record)

    service.apply_remote = counted_apply  # type: ignore[method-assign]
    service.replay_quietly = counted_replay  # type: ignore[method-assign]
    return seen


async def _write(app: App, crdt_id: str, n: int) -> None:
    for _ in range(0, n, 25):
        await asyncio.gather(
            *(op(app, crdt_id, {"op": "insert", "index": 0, "text": "ab"}) for _i in range(25))
        )


async def test_a_load_starts_from_the_snapshot_and_replays_only_the_ops_after_it(
    start_node: StartNode,
) -> None:
    a = await start_node("a", snapshot_every=EVERY)
    b = await start_node("b", snapshot_every=EVERY)
    await settled(a)
    await settled(b)
    await _write(a, "rg:t", 250)  # a snapshot at 200; seqs 1..250 all still held
    applied = count_applied(b)
    await load(b, "rg:t")
    assert full(b, "rg:t") == full(a, "rg:t")
    assert [r["seq"] for r in applied] == list(range(201, 251))
    # Again after an eviction, and the node follows from there.
    entry = b.engine.get(NS, "rg:t")
    assert entry is not None
    b.service.residency.let_go([(entry, entry.seq)])
    assert b.engine.get(NS, "rg:t") is None
    applied.clear()
    await load(b, "rg:t")
    assert [r["seq"] for r in applied] == list(range(201, 251))
    recorder = Recorder(b, "rg:t")
    await op(a, "rg:t", {"op": "insert", "index": 0, "text": "z"})
    while recorder.op_seqs() != [251]:
        await asyncio.sleep(0.02)
    assert full(b, "rg:t") == full(a, "rg:t")


async def test_a_short_crdt_loads_from_its_ops(start_node: StartNode) -> None:
    a = await start_node("a", snapshot_every=EVERY)
    b = await start_node("b", snapshot_every=EVERY)
    await settled(b)
    await _write(a, "rg:t", 50)
    applied = count_applied(b)
    await load(b, "rg:t")
    assert [r["seq"] for r in applied] == list(range(1, 51))
    assert full(b, "rg:t") == full(a, "rg:t")
    # Exactly at a snapshot: nothing after it.
    await _write(a, "rg:t", 50)
    await load(b, "rg:t")
    entry = b.engine.get(NS, "rg:t")
    assert entry is not None
    while entry.seq < EVERY:
        await asyncio.sleep(0.02)
    b.service.residency.let_go([(entry, entry.seq)])
    applied.clear()
    await load(b, "rg:t")
    assert applied == []
    assert full(b, "rg:t") == full(a, "rg:t")
