"""An op that replaces what it writes (a presence entry's update, a
register's set) is refused at a quota only when the state it makes would
pass it: "the state decides, not the estimate" (docs/operations.md#quotas).
Found by probing: the growth bound (the op's size plus 64 bytes) was all
that was looked at, so in a namespace near SERVICE_NAMESPACE_MAX_BYTES every
presence heartbeat, the same entry again, got 403 ``quota_exceeded`` and the
room's users went offline as their entries expired; and a register at more
than half of SERVICE_MAX_CRDT_BYTES could not be set to a value of its own
size. Ops that do grow the state are refused as before."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS, issue, op

BASE = "/v1/namespaces/app/crdts"


async def test_a_presence_heartbeat_passes_in_a_nearly_full_namespace(make_server: Any) -> None:
    server: RunningServer = await make_server(namespace_max_bytes=4000)
    async with httpx.AsyncClient(base_url=server.url) as client:
        alice, bob = await issue(client, client_id=1), await issue(client, client_id=2)
        here = {"op": "update", "data": {"name": "a" * 500}}
        assert (await op(client, alice, "pr:room", here)).status_code == 200
        filler = {"op": "add", "element": "f" * 3000}
        assert (await op(client, alice, "or:fill", filler)).status_code == 200
        usage = (await client.get("/v1/namespaces/app/usage", headers=ADMIN_HEADERS)).json()
        assert usage["bytes"] + len(here["data"]["name"]) > 4000, usage  # the bound would pass
        for _ in range(3):  # heartbeats: the same entry again
            r = await op(client, alice, "pr:room", here)
            assert r.status_code == 200, r.text
        # A new entry grows the state: refused as before.
        r = await op(client, bob, "pr:room", here)
        assert r.status_code == 403 and r.json()["error"] == "quota_exceeded", r.text
        room = (await client.get(f"{BASE}/pr:room", headers=alice)).json()
        assert set(room["value"]) == {"1"}, room


async def test_a_register_takes_a_value_that_fits_in_place_of_its_own(make_server: Any) -> None:
    server: RunningServer = await make_server(max_crdt_bytes=2000)
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        assert (await op(client, h, "lw:r", {"op": "set", "value": "a" * 1200})).status_code == 200
        r = await op(client, h, "lw:r", {"op": "set", "value": "b" * 1300})
        assert r.status_code == 200, r.text
        assert (await client.get(f"{BASE}/lw:r", headers=h)).json()["value"] == "b" * 1300
        r = await op(client, h, "lw:r", {"op": "set", "value": "c" * 2000})
        assert r.status_code == 413 and r.json()["error"] == "crdt_too_large", r.text
        assert (await client.get(f"{BASE}/lw:r", headers=h)).json()["value"] == "b" * 1300
