"""A lagging Yjs peer gets what it missed even when a failed write dropped its
document from memory meanwhile (syncd/yjs/channel.py, ``drained``).

A peer that leaves too much unread is skipped, and sent the whole document
once its socket drains. A failed write drops the documents memory holds ahead
of the store (syncd/service.py): the catch-up then found no document, sent
nothing and forgot the lag, and the peer missed every update skipped until
its next step 1. The server is real, its log writes fail on demand
(tests/store/support.py), and the peer's socket has small buffers and is not
read until the test says.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from pycrdt import Doc, Text, handle_sync_message

from syncd.crdt.ydoc import b64
from syncd.wire import WS_OPCODE_BINARY
from tests.store.support import ENOSPC, gated_server
from tests.ws.support import NS, mint, wait_for
from tests.yjs.support import ROOM, stalled_yjs_peer

DOC = f"yd:{ROOM}"
BOUND = 16 * 1024
"""The subscriber buffer: a peer with more than this unread is skipped."""
EDIT_CHARS = 2000
CATCH_UP_S = 5.0


async def test_a_lagged_peer_catches_up_on_a_document_a_failed_write_dropped(
    tmp_path: Path,
) -> None:
    async with gated_server(tmp_path / "data", subscriber_buffer_bytes=BOUND) as (server, faults):
        app = server.app
        token = mint()
        writer: Doc[Any] = Doc()
        text = writer.get("content", type=Text)

        async with httpx.AsyncClient(
            base_url=server.url, headers={"authorization": f"Bearer {token}"}
        ) as client:

            async def edit(at: int) -> httpx.Response:
                before = writer.get_state()
                text.insert(len(text), f"<{at}>" + "x" * EDIT_CHARS)
                return await client.post(
                    f"/v1/namespaces/{NS}/crdts/{DOC}/ops",
                    json={"op": "update", "update": b64(writer.get_update(before))},
                )

            assert (await edit(0)).status_code == 200
            raw, connection = await stalled_yjs_peer(server, token)
            channel = connection.channel
            edits = 1
            while not connection.write_paused:
                assert edits < 300, "the peer never lagged"
                assert (await edit(edits)).status_code == 200
                edits += 1
            # Skipped from now on: the peer is sent them after it drains.
            for _ in range(3):
                assert (await edit(edits)).status_code == 200
                edits += 1
            await wait_for(lambda: channel._lagged)
            durable = str(text)

            # A write of the document fails: memory, ahead of the store, drops it.
            faults.write_errno = ENOSPC
            assert (await edit(edits)).status_code == 503
            await wait_for(lambda: (NS, DOC) not in app.engine)

            # The peer reads: once drained, it is sent what it missed.
            peer: Doc[Any] = Doc()

            async def caught_up() -> None:
                while str(peer.get("content", type=Text)) != durable:
                    opcode, payload = await raw.frame()
                    if opcode == WS_OPCODE_BINARY and payload[0] == 0:
                        handle_sync_message(payload[1:], peer)

            await asyncio.wait_for(caught_up(), CATCH_UP_S)
            assert not channel._lagged
            raw.close()
            faults.clear()
            await wait_for(lambda: app.service.writable)
