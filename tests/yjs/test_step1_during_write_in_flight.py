"""A peer's step 1 is answered only from what is durable of the document
(docs/protocol.md, "Durability and ordering"; syncd/yjs/channel.py).

Memory is ahead of the store by the edits in flight (applied, their records in
the group commit). A step 2 answered from memory meanwhile gave the peer an
edit whose write then failed: the server forgot it, the peer kept it. The
answer now waits for the edits in flight. The server is real, its log writes
wait on a gate, or fail, when the test says (tests/store/support.py).
"""

from __future__ import annotations

import asyncio
import threading
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
"""How long an answer that must wait is given to come early."""

DOC = f"yd:{ROOM}"


@pytest.mark.parametrize("fails", [False, True], ids=["durable", "failed"])
@pytest.mark.parametrize("peer", [y_websocket, hocuspocus_peer])
async def test_a_step_1_is_answered_once_the_edit_in_flight_is_durable(
    tmp_path: Path, peer: Any, fails: bool
) -> None:
    async with gated_server(tmp_path / "data") as (server, faults):
        token = mint()
        doc: Doc[Any] = Doc()
        text = doc.get("content", type=Text)
        text.insert(0, "hello")
        async with httpx.AsyncClient(
            base_url=server.url, headers={"authorization": f"Bearer {token}"}
        ) as client:
            url = f"/v1/namespaces/{NS}/crdts/{DOC}/ops"
            r = await client.post(url, json={"op": "update", "update": b64(doc.get_update())})
            assert r.status_code == 200, r.text
            async with peer(server, token, step2) as (send, receive):
                await send(sync_step1(EMPTY_STATE_VECTOR))
                assert text_of(await receive()) == "hello"

                before = doc.get_state()
                text.insert(5, " world")
                gate = threading.Event()
                faults.entered.clear()
                faults.gate = gate
                if fails:
                    faults.write_errno = ENOSPC
                write = asyncio.create_task(
                    client.post(url, json={"op": "update", "update": b64(doc.get_update(before))})
                )
                await wait_for(faults.entered.is_set)  # applied, on its way to disk
                await send(sync_step1(EMPTY_STATE_VECTOR))
                try:
                    early = await asyncio.wait_for(receive(), QUIET_S)
                except TimeoutError:
                    pass
                else:
                    pytest.fail(f"answered while the edit was in flight: {text_of(early)!r}")
                gate.set()
                assert (await write).status_code == (503 if fails else 200)
                assert text_of(await receive()) == ("hello" if fails else "hello world")
            faults.clear()
            await wait_for(lambda: server.app.service.writable)
