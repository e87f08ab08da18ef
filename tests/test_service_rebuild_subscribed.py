"""A rebuild after a failed write (syncd/service.py, ``_recover``) reads back the
CRDTs that must stay in memory: those with subscribers.

The rebuild forgets every CRDT (memory may have been ahead of the log). A
subscribed CRDT must be resident (syncd/residency.py): a Yjs peer's step 1 is
answered from the document in memory, and with none there it was answered
with an empty update, so a peer that asked for what it lacked got nothing.
A real server whose files fail on demand (tests/store/support.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from pycrdt import Doc, Text

from syncd.app import App
from syncd.crdt.ydoc import b64
from syncd.server import Server
from syncd.yjs.channel import EMPTY_STATE_VECTOR
from syncd.yjs.protocol import sync_step1
from tests.conftest import RunningServer, base_settings
from tests.http.support import issue, op
from tests.store.support import ENOSPC, Faults, faulty_opener

WAIT_S = 5.0
QUIET_S = 0.3
"""How long a peer listens for the server's messages after each of its own."""


@pytest.fixture
async def faulty_server(tmp_path: Path) -> AsyncIterator[tuple[RunningServer, Faults]]:
    faults = Faults()
    settings = base_settings(tmp_path / "data", fsync="batch")
    app = App(settings, store_options={"opener": faulty_opener(faults), "probe_interval": 0.02})
    server = Server(settings, app)
    await server.start()
    yield RunningServer(server), faults
    await server.shutdown()


async def received(ws: Any) -> list[bytes]:
    messages: list[bytes] = []
    try:
        while True:
            messages.append(await asyncio.wait_for(ws.recv(), QUIET_S))
    except TimeoutError:
        return messages


async def test_a_yjs_peer_is_answered_from_its_document_after_a_rebuild(
    faulty_server: tuple[RunningServer, Faults],
) -> None:
    server, faults = faulty_server
    app = server.app
    async with httpx.AsyncClient(base_url=server.url) as client:
        headers = await issue(client)
        doc: Doc[Any] = Doc()
        doc.get("content", type=Text).insert(0, "hello world")
        r = await op(client, headers, "yd:notes", {"op": "update", "update": b64(doc.get_update())})
        assert r.status_code == 200, r.text
        token = headers["authorization"].removeprefix("Bearer ")
        url = f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/notes?token={token}"
        async with websockets.connect(url) as ws:
            await received(ws)  # the server's opening
            await ws.send(sync_step1(EMPTY_STATE_VECTOR))
            assert len(await received(ws)) == 1  # before the failure: the document
            faults.write_errno = ENOSPC
            r = await op(client, headers, "gc:other", {"op": "increment"})
            assert r.status_code == 503, r.text
            faults.clear()
            deadline = time.monotonic() + WAIT_S
            while not app.service.writable:
                assert time.monotonic() < deadline, "the store did not recover"
                await asyncio.sleep(0.02)
            await ws.send(sync_step1(EMPTY_STATE_VECTOR))
            (answer,) = await received(ws)
    peer: Doc[Any] = Doc()
    peer.apply_update(answer[3:])  # sync (0), step 2 (1), the update's length (1 byte)
    assert str(peer.get("content", type=Text)) == "hello world"
    assert ("app", "yd:notes") in app.engine  # subscribed: resident again
