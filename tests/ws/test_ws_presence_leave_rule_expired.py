"""The presence ``leave`` a closed connection is owed (docs/protocol.md "The
WebSocket") is sent even when the V2 rule that granted its writes has expired
meanwhile: it withdraws the connection's own entry, it writes nothing new.

Before, the leave went through the write rules as a new op would, was refused
(403, logged) once the rule had expired, and the entry stayed listed until
its TTL ran out.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from syncd.auth.permissions import Rule, V2Permissions
from syncd.ws.connection import wait_background
from tests.conftest import ADMIN, RunningServer
from tests.ws.support import mint, op, open_ws

HEADERS = {"Authorization": f"Bearer {ADMIN}"}
RULE_TTL_MS = 1000
"""How long the write rule lasts: long enough to write the entry first."""


async def test_the_leave_is_sent_after_the_write_rule_expired(server: RunningServer) -> None:
    ends = time.time_ns() // 1_000_000 + RULE_TTL_MS
    token = mint(
        client_id=5,
        permissions=V2Permissions(read=(Rule("*"),), write=(Rule("pr:*", expires_at=ends),)),
    )
    async with httpx.AsyncClient(base_url=server.url, headers=HEADERS) as http:
        async with open_ws(server, token) as member:
            ack = await op(member, "pr:room", {"op": "update", "data": {"at": 1}, "ttl_ms": 60_000})
            assert ack["kind"] == "ack", ack
            await asyncio.sleep(RULE_TTL_MS / 1000 + 0.1)
            # The rule has expired: a new write is refused, as documented.
            refused = await op(member, "pr:room", {"op": "update", "data": {"at": 2}}, ref=2)
            assert refused["error"] == "forbidden", refused
        await asyncio.sleep(0.05)
        await wait_background(5.0)
        got = (await http.get("/v1/namespaces/demo/crdts/pr:room")).json()
        assert got["seq"] == 2, got  # the update, then the leave
        assert got["value"] == {}, got
