"""A CRDT whose stored records the engine cannot apply (a damaged or foreign
record) is refused with 503 on each use, and never left half loaded in memory:
a half-loaded CRDT was served as if whole (an older state) and took new ops at
seqs the store already held."""

from __future__ import annotations

import asyncio

import httpx

from tests.conftest import RunningServer
from tests.http.support import issue, op
from tests.test_residency import _evict_all

BASE = "/v1/namespaces/app/crdts"


async def test_a_record_the_engine_cannot_apply_leaves_nothing_resident(
    server: RunningServer,
) -> None:
    app = server.app
    async with httpx.AsyncClient(base_url=server.url) as c:
        h = await issue(c)
        assert (await op(c, h, "gc:x", {"op": "increment", "amount": 3})).status_code == 200
        entry = app.engine.get("app", "gc:x")
        assert entry is not None
        record = {
            "kind": "op",
            "ns": "app",
            "id": "gc:x",
            "seq": 2,
            "epoch": entry.epoch,
            "type": "gcounter",
            # A delta of the wrong shape: apply_delta raises TypeError.
            "op": {"client_id": 99, "count": "many"},
            "ts": app.engine.now_ms(),
            "client_id": 99,
        }
        assert await _evict_all(server) == 0
        await app.store.append([record])
        app.residency.budget_bytes = 1 << 30
        for _ in range(2):
            r = await c.get(f"{BASE}/gc:x", headers=h)
            assert r.status_code == 503, r.text
            assert app.engine.get("app", "gc:x") is None
        # Nor does an op start from the half-loaded state (seq 2 again).
        r = await op(c, h, "gc:x", {"op": "increment"})
        assert r.status_code == 503, r.text
        assert app.engine.get("app", "gc:x") is None
        assert app.engine.resident_bytes == sum(e.size for e in app.engine.lru())
        # Concurrent first uses share the one failed load, all refused alike.
        answers = await asyncio.gather(*(c.get(f"{BASE}/gc:x", headers=h) for _ in range(5)))
        assert {a.status_code for a in answers} == {503}
