"""The memory budget holds with the quotas off (``SERVICE_MAX_CRDT_BYTES=0``
and no namespace limit): the resident estimate follows each CRDT's growth
between its measures as with them on. It followed only the measure every
256 ops, so CRDTs growing by large ops stayed in memory far past the budget
while ``service_engine_resident_bytes`` showed a fraction of it."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from syncd.crdt.engine import state_bytes
from tests.http.support import issue, op

BUDGET_MB = 0.25


def _held(app: Any) -> int:
    """The state bytes memory really holds (each resident CRDT encoded now)."""
    return sum(state_bytes(entry.crdt.state()) for entry in app.engine.lru())


async def test_large_ops_are_counted_against_the_budget_with_quotas_off(
    make_server: Any,
) -> None:
    server = await make_server(memory_budget_mb=BUDGET_MB, max_crdt_bytes=0, rate_limit=100_000)
    app = server.app
    assert not app.service.quotas.on
    budget = app.residency.budget_bytes
    async with httpx.AsyncClient(base_url=server.url) as c:
        h = await issue(c)
        for crdt in range(4):
            for _ in range(24):
                body = {"op": "insert", "index": 0, "text": "x" * 8000}
                r = await op(c, h, f"rg:{crdt}", body)
                assert r.status_code == 200, r.text
        await asyncio.sleep(0.2)  # the eviction pass
        engine = app.engine
        assert engine.resident_bytes >= _held(app)  # the estimate covers the state
        # Four CRDTs of ~190 KB each: at most about one stays under a 256 KB budget.
        assert _held(app) <= budget, (_held(app), engine.resident_bytes, budget)
        assert app.residency.stats.evictions >= 2
