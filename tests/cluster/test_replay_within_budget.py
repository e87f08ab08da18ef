"""A cluster node that only replays other nodes' ops keeps its memory budget
(``SERVICE_MEMORY_BUDGET_MB``): the resident estimate follows each replayed
op's growth, and the eviction pass runs when it passes the budget, as for
local ops. A replayed op was measured only every 256 ops and started no
pass, so CRDTs another node grew by large ops stayed in memory far past the
budget. In-process nodes on the suite's PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

from syncd.app import App
from syncd.crdt.engine import state_bytes
from tests.store.pgnodes import NS, StartNode, eventually, load, op, settled

pytestmark = pytest.mark.timeout(60)

BUDGET_MB = 0.25
TEXTS = 4
INSERTS = 12
INSERT_CHARS = 6_000
"""Small enough to travel inline in a notification (no table read per op)."""


def held(app: App) -> int:
    """The state bytes memory really holds (each resident CRDT encoded now)."""
    return sum(state_bytes(entry.crdt.state()) for entry in app.engine.lru())


async def test_replayed_growth_counts_against_the_budget(start_node: StartNode) -> None:
    a = await start_node("a")
    b = await start_node("b", settings={"memory_budget_mb": BUDGET_MB, "max_crdt_bytes": 0})
    await settled(a)
    await settled(b)
    texts = [f"rg:{n}" for n in range(TEXTS)]
    for text in texts:
        await op(a, text, {"op": "insert", "index": 0, "text": "x"})
    await load(b, *texts)  # b holds them (read once), with no subscribers: they may go
    budget = b.residency.budget_bytes
    for text in texts:
        for _ in range(INSERTS):
            await op(a, text, {"op": "insert", "index": 0, "text": "x" * INSERT_CHARS})
    last = INSERTS + 1

    def replayed() -> bool:
        # Every text either at a's last seq or let go (then read again when used).
        return all((entry := b.engine.get(NS, text)) is None or entry.seq == last for text in texts)

    await eventually(replayed)
    await asyncio.sleep(0.3)  # an eviction pass
    engine = b.engine
    assert engine.resident_bytes >= held(b), (engine.resident_bytes, held(b))
    # Four texts of ~72 KB each (~220 KB estimated): at most about one stays.
    assert held(b) <= budget, (held(b), engine.resident_bytes, budget)
    assert b.residency.stats.evictions >= 2
