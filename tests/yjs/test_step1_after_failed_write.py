"""A peer's step 1 around a failed write is answered from the whole document,
never from a document memory does not hold yet (syncd/yjs/channel.py).

After a failed write the engine is rebuilt from the store: every CRDT is
forgotten, and the subscribed ones are read back while writes are still
refused (syncd/service.py, ``_recover``). A step 1 that came while a read back
was still under way was answered with an empty update: the peer was told the
document had nothing it lacked. It now waits for the read. The server is
real, its store's files fail on demand (tests/store/support.py), and the
read back is held up by the store's history lock, which a compaction holds
the same way.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from pycrdt import Doc, Text

from syncd.crdt.ydoc import b64
from syncd.yjs.channel import EMPTY_STATE_VECTOR
from syncd.yjs.protocol import sync_step1
from tests.store.support import ENOSPC, gated_server
from tests.ws.support import NS, mint, wait_for
from tests.yjs.support import ROOM, hocuspocus_peer, step2, text_of, y_websocket

QUIET_S = 0.3
"""How long an answer that must wait is listened for."""

DOC = f"yd:{ROOM}"


@pytest.mark.parametrize("peer", [y_websocket, hocuspocus_peer])
async def test_a_step_1_during_the_read_back_after_a_rebuild_waits_for_the_document(
    tmp_path: Path, peer: Any
) -> None:
    async with gated_server(tmp_path / "data") as (server, faults):
        app = server.app
        token = mint()
        headers = {"authorization": f"Bearer {token}"}
        doc: Doc[Any] = Doc()
        doc.get("content", type=Text).insert(0, "hello world")
        async with httpx.AsyncClient(base_url=server.url) as client:
            r = await client.post(
                f"/v1/namespaces/{NS}/crdts/{DOC}/ops",
                json={"op": "update", "update": b64(doc.get_update())},
                headers=headers,
            )
            assert r.status_code == 200, r.text
            async with peer(server, token, step2) as (send, receive):
                await send(sync_step1(EMPTY_STATE_VECTOR))
                assert text_of(await receive()) == "hello world"

                history_lock = app.store._history.lock  # held by a compaction too
                await history_lock.acquire()
                try:
                    faults.write_errno = ENOSPC
                    r = await client.post(
                        f"/v1/namespaces/{NS}/crdts/gc:other/ops",
                        json={"op": "increment"},
                        headers=headers,
                    )
                    assert r.status_code == 503, r.text
                    faults.clear()
                    # Rebuilt: the document is being read back (held up by the lock).
                    await wait_for(lambda: app.store.ready and (NS, DOC) not in app.engine)
                    await send(sync_step1(EMPTY_STATE_VECTOR))
                    with pytest.raises(TimeoutError):
                        early = await asyncio.wait_for(receive(), QUIET_S)
                        pytest.fail(f"answered before the document was read back: {early!r}")
                finally:
                    history_lock.release()
                assert text_of(await receive()) == "hello world"
                await wait_for(lambda: app.service.writable)
