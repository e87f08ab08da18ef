"""A restore to a seq whose value the CRDT already reads as applies nothing
(docs/http-api.md: "applied is 0 when the value already equals the one at
N"). An rga's restore went by element ids: text brought back by a revert
(same characters, new ids) was deleted and the old elements inserted again,
two ops that changed nothing a reader sees, the text doubled in between for
every subscriber."""

from __future__ import annotations

import httpx

from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"
HUMAN, AGENT = 7, 9


async def test_restoring_the_text_it_already_reads_applies_nothing(
    server: RunningServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        human = await issue(client, client_id=HUMAN)
        agent = await issue(client, client_id=AGENT)
        await op(client, human, "rg:t", {"op": "insert", "index": 0, "text": "hello"})
        await op(client, agent, "rg:t", {"op": "delete", "index": 0, "count": 1})
        r = await client.post(f"{BASE}/rg:t/revert", json={"client_id": AGENT}, headers=human)
        assert r.json()["applied"] == 1  # "h" back, under a new id
        read = (await client.get(f"{BASE}/rg:t", headers=human)).json()
        assert (read["text"], read["seq"]) == ("hello", 3)
        r = await client.post(f"{BASE}/rg:t/restore", json={"seq": 1}, headers=human)
        assert r.status_code == 200, r.text
        assert r.json() == {"ok": True, "seq": 3, "applied": 0, "restored": 1}
        page = (await client.get(f"{BASE}/rg:t/history", headers=human)).json()
        assert page["seq"] == 3
