"""Yjs updates are attributed like every op: the token's client id, and the
origin the connection was opened with (``?origin=`` on the y-websocket URL
or the Hocuspocus one)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import websockets
from pycrdt import Doc, Text, create_sync_message, create_update_message

from syncd.yjs.protocol import sync_update
from tests.conftest import RunningServer
from tests.http.support import issue
from tests.yjs.test_hocuspocus import Socket, auth, on

CRDTS = "/v1/namespaces/app/crdts"
WAIT_S = 5.0


async def _history(client: httpx.AsyncClient, h: dict[str, str], query: str) -> list[Any]:
    for _ in range(int(WAIT_S / 0.02)):
        r = await client.get(f"{CRDTS}/yd:notes/history{query}", headers=h)
        if r.status_code == 200 and r.json()["ops"]:
            return list(r.json()["ops"])
        await asyncio.sleep(0.02)
    raise AssertionError("no attributed update arrived")


async def test_updates_carry_the_token_client_and_the_connection_origin(
    server: RunningServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client, client_id=12)
        token = h["authorization"].removeprefix("Bearer ")
        url = f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/notes"
        async with websockets.connect(f"{url}?token={token}&origin=agent:yjs-1") as ws:
            doc: Doc[Any] = Doc()
            await ws.send(create_sync_message(doc))
            sv = doc.get_state()
            doc.get("content", type=Text).insert(0, "from the agent")
            await ws.send(create_update_message(doc.get_update(sv)))
            ops = await _history(client, h, "?origin=agent:yjs-1")
        assert ops[0]["client_id"] == 12 and ops[0]["origin"] == "agent:yjs-1"
        assert ops[0]["op"]["op"] == "update"
        assert (await _history(client, h, "?client_id=12"))[0]["seq"] == ops[0]["seq"]


@pytest.mark.parametrize("path", ["yjs/notes", "hocuspocus"])
async def test_a_bad_origin_is_refused_at_the_handshake(server: RunningServer, path: str) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        token = (await issue(client))["authorization"].removeprefix("Bearer ")
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/app/{path}?token={token}&origin="
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(url + "x" * 129)
    assert refused.value.response.status_code == 400


async def test_hocuspocus_updates_carry_the_connection_origin(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client, client_id=13)
        url = f"ws://127.0.0.1:{server.port}/v1/namespaces/app/hocuspocus?origin=agent:hp"
        s = Socket(await websockets.connect(url))
        await s.ws.send(auth("notes", h["authorization"].removeprefix("Bearer ")))
        await s.next("notes", 2)  # authenticated
        update: Doc[Any] = Doc()
        update.get("content", type=Text).insert(0, "hp")
        await s.ws.send(on("notes", sync_update(update.get_update())))
        assert await s.next("notes", 8) == b"\x01"  # durable
        ops = await _history(client, h, "?origin=agent:hp")
        assert ops[0]["client_id"] == 13
        await s.ws.close()
