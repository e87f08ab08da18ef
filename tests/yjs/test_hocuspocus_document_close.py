"""On a Hocuspocus socket, what ends one document ends that document only,
as Hocuspocus's own server does (a close message, type 7, on the document's
name): its deletion, or an update of it refused (too large, over a quota,
a permission refused). The socket used to close with it, and the socket's
other documents with it; an update over the size limit was sent again by
the provider on each reconnect, so one such document kept every other
document of the socket reconnecting, once a second."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import websockets
from pycrdt import Decoder, Doc, Text

from syncd.yjs import hocuspocus
from syncd.yjs.protocol import sync_update
from tests.conftest import ADMIN, RunningServer
from tests.http.support import issue
from tests.yjs.test_hocuspocus import Socket, _token, auth, on

WAIT_S = 5.0
MAX_CRDT_BYTES = 4096


def _update(text: str) -> bytes:
    doc: Doc[Any] = Doc()
    doc.get("content", type=Text).insert(0, text)
    return doc.get_update()


async def _open(server: RunningServer, token: str, *names: str) -> Socket:
    s = Socket(
        await websockets.connect(
            f"ws://127.0.0.1:{server.port}/v1/namespaces/app/hocuspocus", ping_interval=None
        )
    )
    for name in names:
        await s.ws.send(auth(name, token))
        assert (await s.next(name, hocuspocus.MESSAGE_AUTH))[0] == hocuspocus.AUTH_AUTHENTICATED
    return s


async def _still_served(s: Socket, name: str, text: str) -> None:
    """``name`` takes an update and acknowledges it: the socket goes on."""
    await s.ws.send(on(name, sync_update(_update(text))))
    assert await s.next(name, hocuspocus.MESSAGE_SYNC_STATUS) == b"\x01"
    assert s.ws.close_code is None


async def test_a_refused_update_closes_its_document_not_the_socket(make_server: Any) -> None:
    server: RunningServer = await make_server(max_crdt_bytes=MAX_CRDT_BYTES)
    async with httpx.AsyncClient(base_url=server.url) as client:
        token = _token(await issue(client))
    s = await _open(server, token, "big", "small")
    await s.ws.send(on("big", sync_update(_update("x" * 2 * MAX_CRDT_BYTES))))
    closed = Decoder(await s.next("big", hocuspocus.MESSAGE_CLOSE))
    assert "crdt_too_large" in closed.read_var_string()
    await _still_served(s, "small", "fine")
    # "big" is no longer served: its messages are dropped until a new auth.
    await s.ws.send(on("big", sync_update(_update("dropped"))))
    await s.ws.send(auth("big", token))
    assert (await s.next("big", hocuspocus.MESSAGE_AUTH))[0] == hocuspocus.AUTH_AUTHENTICATED
    await _still_served(s, "big", "small enough")
    await s.ws.close()


async def test_a_deleted_document_is_closed_alone(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        token = _token(await issue(client))
        s = await _open(server, token, "gone", "kept")
        await _still_served(s, "gone", "soon deleted")
        r = await client.delete(
            "/v1/namespaces/app/crdts/yd:gone", headers={"authorization": f"Bearer {ADMIN}"}
        )
        assert r.status_code == 204
    closed = Decoder(await s.next("gone", hocuspocus.MESSAGE_CLOSE))
    assert "deleted" in closed.read_var_string()
    await _still_served(s, "kept", "still here")
    await asyncio.wait_for(s.ws.close(), WAIT_S)
