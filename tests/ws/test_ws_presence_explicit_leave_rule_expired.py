"""An explicit presence ``leave`` over the WebSocket once the V2 rule that
granted the connection's writes has expired: it withdraws the entry the
connection wrote, as the leave sent at its close does
(test_ws_presence_leave_rule_expired.py), so it is applied; but only for the
entry this connection owes a leave for, in the life it wrote it in. Any
other write, and a leave of an entry that is not the connection's (never
written by it, written since by another connection of the same client, or
of a CRDT deleted and made anew), is refused as before (403).

Before, the explicit leave was refused once the rule had expired, and the
entry stayed listed until the connection closed (or its TTL ran out)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from syncd.auth.permissions import Rule, V2Permissions
from tests.conftest import ADMIN, RunningServer
from tests.store.pgnodes import pg_db, pg_url, schema
from tests.ws.support import mint, op, open_ws

__all__ = ["pg_db", "pg_url", "schema"]  # the fixtures the PostgreSQL test uses

HEADERS = {"Authorization": f"Bearer {ADMIN}"}
RULE_TTL_MS = 1000
"""How long the write rule lasts: long enough to write the entry first."""
CID = 5
LEAVE = {"op": "leave"}


def _expiring_token() -> str:
    ends = time.time_ns() // 1_000_000 + RULE_TTL_MS
    return mint(
        client_id=CID,
        permissions=V2Permissions(read=(Rule("*"),), write=(Rule("pr:*", expires_at=ends),)),
    )


async def _expired() -> None:
    await asyncio.sleep(RULE_TTL_MS / 1000 + 0.1)


async def _value(http: httpx.AsyncClient, crdt_id: str) -> Any:
    got = await http.get(f"/v1/namespaces/demo/crdts/{crdt_id}")
    assert got.status_code == 200, got.text
    return got.json()["value"]


async def _leave_after_expiry(node: RunningServer) -> None:
    async with (
        httpx.AsyncClient(base_url=node.url, headers=HEADERS) as http,
        open_ws(node, _expiring_token()) as member,
    ):
        ack = await op(member, "pr:x", {"op": "update", "data": {"at": 1}, "ttl_ms": 60_000})
        assert ack["kind"] == "ack", ack
        await _expired()
        refused = await op(member, "pr:x", {"op": "update", "data": {"at": 2}}, ref=2)
        assert refused["error"] == "forbidden", refused
        left = await op(member, "pr:x", LEAVE, ref=3)
        assert left["kind"] == "ack", left
        assert await _value(http, "pr:x") == {}
        # Owed no more: a second leave is refused, as any write now.
        again = await op(member, "pr:x", LEAVE, ref=4)
        assert again["error"] == "forbidden", again


async def test_an_explicit_leave_after_the_rule_expired_removes_the_entry(
    server: RunningServer,
) -> None:
    await _leave_after_expiry(server)


async def test_on_postgres_an_explicit_leave_after_the_rule_expired_removes_the_entry(
    make_server: Any, pg_url: str
) -> None:
    await _leave_after_expiry(await make_server(database_url=pg_url, node_id="leave-pg"))


async def test_a_leave_of_an_entry_never_written_here_is_refused(server: RunningServer) -> None:
    async with (
        httpx.AsyncClient(base_url=server.url, headers=HEADERS) as http,
        open_ws(server, mint(client_id=CID)) as other,
        open_ws(server, _expiring_token()) as member,
    ):
        await op(other, "pr:n", {"op": "update", "data": {"by": "other"}})
        await _expired()
        refused = await op(member, "pr:n", LEAVE, ref=2)
        assert refused["error"] == "forbidden", refused
        assert await _value(http, "pr:n") == {str(CID): {"by": "other"}}


async def test_a_leave_of_an_entry_another_connection_wrote_since_is_refused(
    server: RunningServer,
) -> None:
    async with (
        httpx.AsyncClient(base_url=server.url, headers=HEADERS) as http,
        open_ws(server, mint(client_id=CID)) as other,
        open_ws(server, _expiring_token()) as member,
    ):
        await op(member, "pr:s", {"op": "update", "data": {"by": "member"}})
        await op(other, "pr:s", {"op": "update", "data": {"by": "other"}})
        await _expired()
        refused = await op(member, "pr:s", LEAVE, ref=2)
        assert refused["error"] == "forbidden", refused
        assert await _value(http, "pr:s") == {str(CID): {"by": "other"}}


@pytest.mark.parametrize("written_again", [False, True], ids=["deleted", "made-anew"])
async def test_a_leave_in_another_life_is_refused(
    server: RunningServer, written_again: bool
) -> None:
    async with (
        httpx.AsyncClient(base_url=server.url, headers=HEADERS) as http,
        open_ws(server, mint(client_id=CID)) as other,
        open_ws(server, _expiring_token()) as member,
    ):
        await op(member, "pr:l", {"op": "update", "data": {"by": "member"}})
        deleted = await http.delete("/v1/namespaces/demo/crdts/pr:l")
        assert deleted.status_code in (200, 204), deleted.text
        if written_again:
            await op(other, "pr:l", {"op": "update", "data": {"by": "other"}})
        await _expired()
        refused = await op(member, "pr:l", LEAVE, ref=2)
        assert refused["error"] == "forbidden", refused
        got = await http.get("/v1/namespaces/demo/crdts/pr:l")
        if written_again:
            assert got.json()["value"] == {str(CID): {"by": "other"}}
        else:
            assert got.status_code == 404, got.text  # no life started by the leave
