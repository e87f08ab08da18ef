"""A revert refused by a quota part way applies none of its ops (docs/revert.md,
"All or nothing"): on the embedded store its ops are staged one at a time,
and the CRDT's size limit refused the second insert after the first was
applied and made durable; the same request again then answered a duplicate
of a revert that was never whole. The run is checked as one batch first, on
a copy of the CRDT (the state it makes decides, not the bound), so the text
written after the agent's cut leaves room for either insert alone, not for
both."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"
HUMAN, AGENT = 7, 9


async def test_a_revert_past_the_crdt_limit_applies_none_of_its_ops(make_server: Any) -> None:
    # Room for the human's text, and, once the human wrote again in the room
    # the agent's cut made, for either of the two inserts that bring back
    # what the agent deleted, but not for both.
    server: RunningServer = await make_server(max_crdt_bytes=1620)
    async with httpx.AsyncClient(base_url=server.url) as client:
        human = await issue(client, client_id=HUMAN)
        agent = await issue(client, client_id=AGENT)
        text = "x" * 600 + "|" + "y" * 900
        assert (
            await op(client, human, "rg:q", {"op": "insert", "index": 0, "text": text})
        ).is_success
        cut = [
            {"op": "delete", "index": 601, "count": 900},
            {"op": "delete", "index": 0, "count": 600},
        ]
        assert (await op(client, agent, "rg:q", cut)).is_success
        later = {"op": "insert", "index": 1, "text": "z" * 500}
        assert (await op(client, human, "rg:q", later)).is_success
        body = {"client_id": AGENT, "op_id": "undo-1"}
        r = await client.post(f"{BASE}/rg:q/revert", json=body, headers=human)
        assert r.status_code == 413, r.text
        assert r.json()["error"] == "crdt_too_large"
        read = (await client.get(f"{BASE}/rg:q", headers=human)).json()
        assert (read["seq"], read["text"]) == (4, "|" + "z" * 500)
        page = (await client.get(f"{BASE}/rg:q/history", headers=human)).json()
        assert [o["seq"] for o in page["ops"]] == [4, 3, 2, 1]
        again = await client.post(f"{BASE}/rg:q/revert", json=body, headers=human)
        assert again.status_code == 413, again.text  # not a duplicate of a part
