"""MAX_INFLIGHT_UPDATES at its edge on a real y-websocket connection: that
many of a peer's updates may await the store; past that the server stops
reading the socket until half are durable, and then every update is applied.
The updates wait in a real embedded store whose log writes wait on a gate
(tests/store/support.py)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import httpx
import websockets
from pycrdt import Doc, Text

from syncd.yjs.connection import MAX_INFLIGHT_UPDATES
from syncd.yjs.protocol import sync_update
from tests.conftest import ADMIN
from tests.store.support import gated_server
from tests.ws.support import NS, mint

EXTRA = 40


async def test_a_peer_may_have_max_inflight_updates_awaiting_the_store(tmp_path: Path) -> None:
    doc: Doc[Any] = Doc(client_id=5)
    text = doc.get("content", type=Text)
    updates = []
    for i in range(MAX_INFLIGHT_UPDATES + EXTRA):
        before = doc.get_state()
        text += "x"
        updates.append(doc.get_update(before))
        assert i < 1 or updates[-1] != updates[-2]
    # The token's rate limit out of the way: an update over it holds reading too.
    async with gated_server(tmp_path / "data", rate_limit=1_000_000) as (server, faults):
        url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/burst?token={mint()}"
        async with websockets.connect(url, ping_interval=None) as ws:
            await ws.send(sync_update(updates[0]))  # the document exists: later writes
            async with httpx.AsyncClient(
                base_url=server.url, headers={"authorization": f"Bearer {ADMIN}"}
            ) as client:
                for _ in range(200):
                    r = await client.get(f"/v1/namespaces/{NS}/crdts/yd:burst?root=content")
                    if r.status_code == 200:
                        break
                    await asyncio.sleep(0.01)
                faults.gate = gate = threading.Event()
                for update in updates[1:]:
                    await ws.send(sync_update(update))
                (connection,) = server.server.ctx.other_connections
                session = connection.session
                for _ in range(200):
                    if session.inflight == MAX_INFLIGHT_UPDATES:
                        break
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.1)  # had it read on, more would be in flight by now
                assert session.inflight == MAX_INFLIGHT_UPDATES
                assert session.held
                gate.set()
                want = "x" * (MAX_INFLIGHT_UPDATES + EXTRA)
                for _ in range(300):
                    r = await client.get(f"/v1/namespaces/{NS}/crdts/yd:burst?root=content")
                    if r.json().get("value") == want:
                        break
                    await asyncio.sleep(0.01)
                assert r.json().get("value") == want, r.text[:200]
                assert session.inflight == 0 and not session.held
