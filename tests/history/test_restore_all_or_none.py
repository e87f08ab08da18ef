"""A restore of more ops than one client batch is applied all or none
(syncd/history/restore.py): one refused part way (here by the namespace byte
quota) leaves nothing applied, so the same request again with its op_id
applies it whole instead of answering a repeat of the part applied."""

from __future__ import annotations

from typing import Any

import httpx

from syncd.crdt.engine import MAX_BATCH_OPS
from tests.http.support import ADMIN_HEADERS, issue, op

BASE = "/v1/namespaces/app/crdts"
COUNT = MAX_BATCH_OPS + MAX_BATCH_OPS // 2
"""Elements to restore: more than one batch."""
QUOTA = 1_000_000


async def test_a_restore_refused_part_way_applies_nothing_and_a_retry_applies_all(
    make_server: Any, tmp_path: Any
) -> None:
    names = [f"{i:05d}" + "e" * 200 for i in range(COUNT)]
    # The history, written without a quota: COUNT adds, then COUNT removes.
    first = await make_server(data_dir=tmp_path / "d", rate_limit=10**7)
    async with httpx.AsyncClient(base_url=first.url) as client:
        h = await issue(client)
        for kind in ("add", "remove"):
            for start in range(0, COUNT, 500):
                batch = [{"op": kind, "element": e} for e in names[start : start + 500]]
                r = await op(client, h, "or:s", batch)
                assert r.status_code == 200, r.text
    await first.server.shutdown()
    # Again with a quota that leaves room for about two thirds of the
    # restore's adds: less than the bound of its first MAX_BATCH_OPS, and
    # less than what all of them grow the set by (the quotas try an op the
    # bound refuses on a copy of a small CRDT: syncd/quotas.py).
    server = await make_server(data_dir=tmp_path / "d", rate_limit=10**7, namespace_max_bytes=QUOTA)
    service = server.app.service
    body = {"seq": COUNT, "op_id": "undo-1"}
    adds = [
        {"op": "add", "element": e, "op_id": f"undo-1/{i}"}
        for i, e in enumerate(names[:MAX_BATCH_OPS])
    ]
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        bound = service.quotas.growth(service.engine.plan("app", "or:s", adds))
        held = (await client.get("/v1/namespaces/app/usage", headers=ADMIN_HEADERS)).json()
        pad_len = QUOTA - held["bytes"] - bound + 30_000
        pad = await op(client, h, "lw:pad", {"op": "set", "value": "x" * pad_len})
        assert pad.status_code == 200, pad.text
        refused = await client.post(f"{BASE}/or:s/restore", json=body, headers=h)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"] == "quota_exceeded"
        after = (await client.get(f"{BASE}/or:s", headers=h)).json()
        assert after["value"] == []  # nothing of it applied
        deleted = await client.delete(f"{BASE}/lw:pad", headers=ADMIN_HEADERS)  # room again
        assert deleted.status_code == 204
        again = await client.post(f"{BASE}/or:s/restore", json=body, headers=h)
        assert again.status_code == 200, again.text
        assert again.json()["applied"] == COUNT
        assert "duplicate" not in again.json()
        now = (await client.get(f"{BASE}/or:s", headers=h)).json()
        assert now["value"] == names
