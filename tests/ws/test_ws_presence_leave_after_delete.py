"""The presence ``leave`` a closed connection is owed (docs/protocol.md "The
WebSocket") is for the entry it wrote, in the life it wrote it in.

Before, a presence CRDT deleted while the writer was connected came back when
the writer left: its ``leave`` started a new life (seq 1, listed, broadcast),
and one re-created by someone else meanwhile got a ``leave`` of an entry it
never had.
"""

from __future__ import annotations

import asyncio

import httpx

from syncd.ws.connection import wait_background
from tests.conftest import ADMIN, RunningServer
from tests.ws.support import mint, op, open_ws

HEADERS = {"Authorization": f"Bearer {ADMIN}"}


async def _settled(server: RunningServer) -> None:
    """The closed connection's disconnect ops have run (or were skipped)."""
    await asyncio.sleep(0.05)
    await wait_background(5.0)


async def test_a_deleted_presence_is_not_brought_back_by_the_leave(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers=HEADERS) as http:
        async with open_ws(server, mint(client_id=5)) as member:
            ack = await op(member, "pr:gone", {"op": "update", "data": {"at": 1}})
            assert ack["seq"] == 1
            assert (await http.delete("/v1/namespaces/demo/crdts/pr:gone")).status_code == 204
        await _settled(server)
        assert (await http.get("/v1/namespaces/demo/crdts/pr:gone")).status_code == 404
        listed = (await http.get("/v1/namespaces/demo/crdts")).json()["crdts"]
        assert all(c["id"] != "pr:gone" for c in listed)


async def test_a_presence_recreated_by_another_gets_no_leave_of_ours(
    server: RunningServer,
) -> None:
    async with (
        httpx.AsyncClient(base_url=server.url, headers=HEADERS) as http,
        open_ws(server, mint(client_id=5)) as member,
    ):
        await op(member, "pr:again", {"op": "update", "data": {"at": 1}})
        assert (await http.delete("/v1/namespaces/demo/crdts/pr:again")).status_code == 204
        async with open_ws(server, mint(client_id=6)) as other:
            ack = await op(other, "pr:again", {"op": "update", "data": {"at": 2}})
            assert ack["seq"] == 1
            await member.close()
            await _settled(server)
            got = (await http.get("/v1/namespaces/demo/crdts/pr:again")).json()
            assert got["seq"] == 1  # no leave of client 5 in the new life
            assert list(got["value"]) == ["6"]
