"""SERVICE_NAMESPACE_MAX_CRDTS counts every creation, a trimming op's too: an
orset ``remove`` or a presence ``leave`` on a new id creates the CRDT (it
gets seq 1), so in a full namespace it is refused like any other op that
would create one more. Found by probing: trimming ops skipped every quota
check, so a namespace at its limit took any number of new CRDTs made by
removes and leaves. An existing CRDT is still trimmed whatever the quotas."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS, issue, op

BASE = "/v1/namespaces/app/crdts"


@pytest.mark.parametrize(
    ("crdt_id", "body"),
    [
        ("or:new", {"op": "remove", "element": "x"}),
        ("or:new", [{"op": "remove", "element": "x"}, {"op": "remove", "element": "y"}]),
        ("pr:new", {"op": "leave"}),
    ],
)
async def test_a_trimming_op_on_a_new_id_counts_as_a_creation(
    make_server: Any, crdt_id: str, body: Any
) -> None:
    server: RunningServer = await make_server(namespace_max_crdts=1)
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        assert (await op(client, h, "or:full", {"op": "add", "element": "x"})).status_code == 200
        r = await op(client, h, crdt_id, body)
        assert r.status_code == 403 and r.json()["error"] == "quota_exceeded", r.text
        assert "SERVICE_NAMESPACE_MAX_CRDTS" in r.json()["message"]
        assert (await client.get(f"{BASE}/{crdt_id}", headers=h)).status_code == 404
        usage = await client.get("/v1/namespaces/app/usage", headers=ADMIN_HEADERS)
        assert usage.json()["crdts"] == 1
        # The CRDT the namespace holds is still trimmed at the limit.
        r = await op(client, h, "or:full", {"op": "remove", "element": "x"})
        assert r.status_code == 200, r.text
