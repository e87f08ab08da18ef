"""Reads while the store refuses writes serve only what is durable
(syncd/service.py, ``_forget_unacknowledged``).

A failed op was applied in memory before its write failed; until the rebuild
memory held it, and an HTTP GET or a Yjs step 1 served it, though the rebuild
then removed it (it was answered 503). At the failure the CRDTs memory holds
ahead of the store are dropped, so a read loads them from the store. A real
server whose store's files fail on demand (tests/store/support.py), the
disk still full while the reads are made.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import httpx
from pycrdt import Doc, Text

from syncd.crdt.ydoc import b64
from syncd.yjs.channel import EMPTY_STATE_VECTOR
from syncd.yjs.protocol import sync_step1
from tests.store.support import ENOSPC, gated_server
from tests.ws.support import NS, mint, wait_for
from tests.yjs.support import ROOM, step2, text_of, y_websocket

DOC = f"yd:{ROOM}"
CRDTS = f"/v1/namespaces/{NS}/crdts"


def edit(doc: Doc[Any], text: str) -> dict[str, str]:
    """An update op appending ``text`` to ``doc``'s content."""
    content = doc.get("content", type=Text)
    before = doc.get_state()
    content.insert(len(content), text)
    return {"op": "update", "update": b64(doc.get_update(before))}


async def test_reads_during_an_outage_do_not_serve_the_failed_ops(tmp_path: Path) -> None:
    async with gated_server(tmp_path / "data") as (server, faults):
        app = server.app
        token = mint()
        headers = {"authorization": f"Bearer {token}"}
        doc: Doc[Any] = Doc()
        async with httpx.AsyncClient(base_url=server.url, headers=headers) as client:
            r = await client.post(f"{CRDTS}/gc:hits/ops", json={"op": "increment"})
            assert r.status_code == 200, r.text
            r = await client.post(f"{CRDTS}/{DOC}/ops", json=edit(doc, "hello"))
            assert r.status_code == 200, r.text
            async with y_websocket(server, token, step2) as (send, receive):
                await send(sync_step1(EMPTY_STATE_VECTOR))
                assert text_of(await receive()) == "hello"

                # Three ops in flight (the first one's write held at the gate,
                # the others queued behind it), then the disk is full: all fail.
                gate = faults.gate = threading.Event()
                faults.entered.clear()
                posts = [
                    asyncio.create_task(client.post(f"{CRDTS}/gc:hits/ops", json=body))
                    for body in [{"op": "increment"}]
                ]
                await wait_for(faults.entered.is_set)
                posts += [
                    asyncio.create_task(client.post(f"{CRDTS}/{crdt_id}/ops", json=body))
                    for crdt_id, body in [
                        (DOC, edit(doc, " world")),
                        ("gc:new", {"op": "increment"}),
                    ]
                ]
                await wait_for(lambda: (NS, "gc:new") in app.engine)  # applied in memory
                faults.write_errno = ENOSPC  # and it stays full during the reads
                gate.set()
                for r in await asyncio.gather(*posts):
                    assert r.status_code == 503, r.text
                faults.gate = None
                assert not app.service.writable

                await send(sync_step1(EMPTY_STATE_VECTOR))  # the subscribed peer asks again
                assert text_of(await receive()) == "hello"

                r = await client.get(f"{CRDTS}/gc:hits")
                assert r.status_code == 200, r.text
                assert r.json()["value"] == 1
                r = await client.get(f"{CRDTS}/{DOC}", params={"root": "content", "as": "text"})
                assert r.status_code == 200, r.text
                assert r.json()["value"] == "hello"
                r = await client.get(f"{CRDTS}/gc:new")
                assert r.status_code == 404, r.text

                faults.clear()
                await wait_for(lambda: app.service.writable)
                assert (NS, DOC) in app.engine  # subscribed: read back after the rebuild
                r = await client.get(f"{CRDTS}/gc:hits")
                assert r.json()["value"] == 1
                r = await client.post(f"{CRDTS}/gc:hits/ops", json={"op": "increment"})
                assert r.status_code == 200, r.text
                r = await client.get(f"{CRDTS}/gc:hits")
                assert r.json()["value"] == 2
                await send(sync_step1(EMPTY_STATE_VECTOR))
                assert text_of(await receive()) == "hello"


async def test_a_subscribed_crdt_dropped_at_the_failure_is_read_back_after_the_rebuild(
    tmp_path: Path,
) -> None:
    """Dropped at the failure (memory was ahead of the store) and not read
    during the outage: the rebuild reads it back all the same, as it does the
    subscribed CRDTs it finds in memory (syncd/residency.py: they stay)."""
    async with gated_server(tmp_path / "data") as (server, faults):
        app = server.app
        token = mint()
        doc: Doc[Any] = Doc()
        headers = {"authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers) as client:
            r = await client.post(f"{CRDTS}/{DOC}/ops", json=edit(doc, "hello"))
            assert r.status_code == 200, r.text
            async with y_websocket(server, token, step2) as (send, receive):
                await send(sync_step1(EMPTY_STATE_VECTOR))
                assert text_of(await receive()) == "hello"
                faults.write_errno = ENOSPC
                r = await client.post(f"{CRDTS}/{DOC}/ops", json=edit(doc, " world"))
                assert r.status_code == 503, r.text
                assert (NS, DOC) not in app.engine
                faults.clear()
                await wait_for(lambda: app.service.writable)
                assert (NS, DOC) in app.engine
