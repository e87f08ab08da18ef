"""A y-websocket provider whose document is deleted is closed with 4410
(syncd/yjs/channel.py, ``CLOSE_DOCUMENT_DELETED``), in y-websocket's range
of closes it does not reconnect after (4400-4499, from 3.1).

It was closed with 1000, after which a provider reconnects at once and
sends its copy back, creating the document again (clients/js/test/yjs.test.js
shows it with the real provider). The Hocuspocus side is unchanged: its close
message carries a reason only (test_hocuspocus_document_close)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import websockets
from pycrdt import Doc, Text, create_sync_message, create_update_message

from tests.conftest import ADMIN, RunningServer
from tests.http.support import ADMIN_HEADERS
from tests.ws.support import NS
from tests.yjs.support import ROOM, WAIT_S


async def test_a_deleted_documents_provider_is_closed_4410(server: RunningServer) -> None:
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/{ROOM}?token={ADMIN}"
    crdt = f"/v1/namespaces/{NS}/crdts/yd:{ROOM}"
    doc: Doc[object] = Doc()
    async with (
        websockets.connect(url, ping_interval=None, max_queue=None) as ws,
        httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS) as client,
    ):
        await ws.send(create_sync_message(doc))
        updates: list[bytes] = []
        doc.observe(lambda event: updates.append(event.update))
        doc.get("content", type=Text).insert(0, "soon deleted")
        await ws.send(create_update_message(updates[0]))
        for _ in range(int(WAIT_S / 0.05)):
            if (await client.get(crdt)).status_code == 200:
                break
            await asyncio.sleep(0.05)
        assert (await client.delete(crdt)).status_code == 204
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                await asyncio.wait_for(ws.recv(), WAIT_S)
        assert closed.value.rcvd is not None
        assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4410, "document deleted")
