"""A native WebSocket ``subscribe`` counts against the token's rate limit, as an op does.

Each subscribe sends the CRDT's whole state (and may load it from the store):
a subscribe/unsubscribe loop on one connection must be bounded by the same
limit as everything else the token does. Unsubscribe stays free; the root
admin secret stays unlimited.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from syncd.auth.permissions import Rule, V2Permissions
from tests.conftest import ADMIN, RunningServer
from tests.ws.support import NS, mint, op, open_ws, recv, recv_kind, send_json, send_mp

GC_INCREMENT = {"op": "increment"}


def _limited(rate_limit: int) -> str:
    """A token that may read and write everything, at ``rate_limit`` per second."""
    everything = (Rule("*"),)
    return mint(permissions=V2Permissions(everything, everything, rate_limit=rate_limit))


async def _admin_increment(server: RunningServer, crdt_id: str) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post(
            f"/v1/namespaces/{NS}/crdts/{crdt_id}/ops",
            json=GC_INCREMENT,
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert response.status_code == 200, response.text


async def _ping(ws: Any) -> None:
    """A round trip: every answer owed before it has arrived."""
    await send_mp(ws, {"kind": "ping", "ref": "p"})
    assert await recv_kind(ws, "pong") == {"kind": "pong", "ref": "p"}


async def test_a_subscribe_over_the_limit_is_refused_and_the_connection_goes_on(
    server: RunningServer,
) -> None:
    token = _limited(3)
    async with open_ws(server, token) as ws:  # the upgrade: 1
        await send_mp(ws, {"kind": "subscribe", "id": "gc:a"})  # 2
        assert (await recv(ws))["kind"] == "snapshot"
        await send_mp(ws, {"kind": "subscribe", "id": "gc:b"})  # 3
        assert (await recv(ws))["kind"] == "snapshot"
        await send_mp(ws, {"kind": "subscribe", "id": "gc:c", "ref": 9})
        refused = await recv(ws)
        # The answer shape of a rate-limited op, naming the subscribe's id.
        assert refused["kind"] == "error" and refused["error"] == "rate_limited", refused
        assert refused["id"] == "gc:c" and refused["ref"] == 9
        assert isinstance(refused["retry_after"], int) and refused["retry_after"] >= 1
        # In the subscribe's own encoding, like every answer.
        await send_json(ws, {"kind": "subscribe", "id": "gc:c"})
        text = await asyncio.wait_for(ws.recv(), 5)
        assert isinstance(text, str) and '"rate_limited"' in text
        # Refused, a subscribe to an id already subscribed leaves that
        # subscription as it was: its deltas keep coming.
        await send_mp(ws, {"kind": "subscribe", "id": "gc:a"})
        assert (await recv(ws))["error"] == "rate_limited"
        await _ping(ws)
        await _admin_increment(server, "gc:a")
        delta = await recv(ws)
        assert (delta["kind"], delta["id"], delta["seq"]) == ("op", "gc:a", 1)
        # Once the window has passed, the subscribe goes through.
        await asyncio.sleep(refused["retry_after"])
        await send_mp(ws, {"kind": "subscribe", "id": "gc:c"})
        snapshot = await recv(ws)
        assert (snapshot["kind"], snapshot["id"]) == ("snapshot", "gc:c")


async def test_subscribes_and_ops_share_the_tokens_limit(server: RunningServer) -> None:
    token = _limited(3)
    async with open_ws(server, token) as ws:  # 1
        assert (await op(ws, "gc:s", GC_INCREMENT, ref=1))["kind"] == "ack"  # 2
        await send_mp(ws, {"kind": "subscribe", "id": "gc:s"})  # 3
        assert (await recv(ws))["kind"] == "snapshot"
        answer = await op(ws, "gc:s", GC_INCREMENT, ref=2)
        assert answer["error"] == "rate_limited" and answer["retry_after"] >= 1


async def test_unsubscribe_is_not_counted(server: RunningServer) -> None:
    token = _limited(3)
    async with open_ws(server, token) as ws:  # 1
        await send_mp(ws, {"kind": "subscribe", "id": "gc:u"})  # 2
        assert (await recv(ws))["kind"] == "snapshot"
        for _ in range(20):
            await send_mp(ws, {"kind": "unsubscribe", "id": "gc:u"})
        await _ping(ws)  # nothing came back for the unsubscribes
        await send_mp(ws, {"kind": "subscribe", "id": "gc:u"})  # 3
        assert (await recv(ws))["kind"] == "snapshot"
        # The limit is still there: only the unsubscribes were free.
        await send_mp(ws, {"kind": "unsubscribe", "id": "gc:u"})
        await send_mp(ws, {"kind": "subscribe", "id": "gc:u"})
        assert (await recv(ws))["error"] == "rate_limited"


async def test_the_admin_secret_is_not_limited(make_server: Any) -> None:
    server: RunningServer = await make_server(rate_limit=2)
    async with open_ws(server, ADMIN) as ws:
        for _ in range(30):
            await send_mp(ws, {"kind": "subscribe", "id": "gc:adm"})
            assert (await recv(ws))["kind"] == "snapshot"
            await send_mp(ws, {"kind": "unsubscribe", "id": "gc:adm"})
    # The same server limits a token: the admin's run was not merely fast.
    async with open_ws(server, mint()) as ws:  # 1
        await send_mp(ws, {"kind": "subscribe", "id": "gc:adm"})  # 2
        assert (await recv(ws))["kind"] == "snapshot"
        await send_mp(ws, {"kind": "subscribe", "id": "gc:adm"})
        assert (await recv(ws))["error"] == "rate_limited"
