"""A deleted Yjs document is not created again by a stale editor's copy
(syncd.crdt.ydoc.DeletedYDocs, asked by syncd/yjs/channel.py).

A provider keeps its copy of a deleted document and sends it whole when it
connects again (its sync step 2, or an update); Hocuspocus's provider
reconnects whatever it is told. Written, the copy created the document
again with the deleted content. For DELETED_DOC_MEMORY_S after the
deletion (at most DELETED_DOCS_KEPT documents), such an update is refused:
y-websocket with the 4410 close, Hocuspocus with the close message on the
document's name, both "document deleted". A fresh editor (new client ids)
and HTTP writes create the document as before."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import httpx
import pytest
import websockets
from pycrdt import Decoder, Doc, Text

from syncd.crdt.ydoc import EMPTY_UPDATE, DeletedYDocs, b64
from syncd.yjs import hocuspocus
from syncd.yjs.protocol import sync_step2, sync_update
from tests.conftest import ADMIN, RunningServer
from tests.http.support import ADMIN_HEADERS
from tests.ws.support import NS
from tests.yjs.test_hocuspocus import Socket, auth, on

WAIT_S: Final = 5.0


def _editor(text: str) -> Doc[Any]:
    doc: Doc[Any] = Doc()
    doc.get("content", type=Text).insert(0, text)
    return doc


def _path(name: str) -> str:
    return f"/v1/namespaces/{NS}/crdts/yd:{name}"


@asynccontextmanager
async def _admin(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS) as client:
        yield client


async def _written(client: httpx.AsyncClient, name: str, text: str) -> None:
    for _ in range(int(WAIT_S / 0.05)):
        r = await client.get(_path(name), params={"root": "content"})
        if r.status_code == 200 and r.json()["value"] == text:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never read {text!r}")


async def _y_websocket_sends(server: RunningServer, name: str, update: bytes) -> tuple[int, str]:
    """A y-websocket peer joins ``name`` and sends ``update`` (as a provider
    does its step 2 after a reconnect); the close it gets, or (0, "") when
    the update was taken (the document then reads it)."""
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/{name}?token={ADMIN}"
    async with websockets.connect(url, ping_interval=None, max_queue=None) as ws:
        await ws.send(sync_step2(update))
        try:
            while True:
                await asyncio.wait_for(ws.recv(), 0.5)
        except websockets.ConnectionClosed as closed:
            assert closed.rcvd is not None
            return closed.rcvd.code, closed.rcvd.reason
        except TimeoutError:
            return 0, ""


async def _create_then_delete(server: RunningServer, name: str, text: str) -> Doc[Any]:
    """An editor writes ``name`` over y-websocket, then it is deleted over
    HTTP: the editor's copy, stale."""
    editor = _editor(text)
    assert await _y_websocket_sends(server, name, editor.get_update()) == (0, "")
    async with _admin(server) as client:
        await _written(client, name, text)
        assert (await client.delete(_path(name))).status_code == 204
    return editor


async def test_a_stale_y_websocket_copy_is_refused_4410(server: RunningServer) -> None:
    stale = await _create_then_delete(server, "gone", "deleted content")
    assert await _y_websocket_sends(server, "gone", stale.get_update()) == (
        4410,
        "document deleted",
    )
    # The editor's later edits alone (items past the deleted clocks, on top
    # of the deleted content) are refused too.
    before = stale.get_state()
    stale.get("content", type=Text).insert(0, "more ")
    assert await _y_websocket_sends(server, "gone", stale.get_update(before)) == (
        4410,
        "document deleted",
    )
    async with _admin(server) as client:
        assert (await client.get(_path("gone"))).status_code == 404
    # A fresh editor creates it again.
    assert await _y_websocket_sends(server, "gone", _editor("new").get_update()) == (0, "")
    async with _admin(server) as client:
        await _written(client, "gone", "new")


async def test_a_stale_hocuspocus_copy_is_refused_with_the_close_message(
    server: RunningServer,
) -> None:
    stale = _editor("deleted content")
    ws = await websockets.connect(
        f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/hocuspocus", ping_interval=None
    )
    s = Socket(ws)
    try:
        await ws.send(auth("gone", ADMIN))
        assert (await s.next("gone", hocuspocus.MESSAGE_AUTH))[0] == hocuspocus.AUTH_AUTHENTICATED
        await ws.send(on("gone", sync_update(stale.get_update())))
        assert await s.next("gone", hocuspocus.MESSAGE_SYNC_STATUS) == b"\x01"
        async with _admin(server) as client:
            assert (await client.delete(_path("gone"))).status_code == 204
        await s.next("gone", hocuspocus.MESSAGE_CLOSE)
        # What the provider does when its socket reconnects: auth, then its
        # whole copy as the step 2 to our step 1.
        await ws.send(auth("gone", ADMIN))
        assert (await s.next("gone", hocuspocus.MESSAGE_AUTH))[0] == hocuspocus.AUTH_AUTHENTICATED
        await ws.send(on("gone", sync_step2(stale.get_update())))
        closed = Decoder(await s.next("gone", hocuspocus.MESSAGE_CLOSE))
        assert closed.read_var_string() == "document deleted"
        async with _admin(server) as client:
            assert (await client.get(_path("gone"))).status_code == 404
            # The socket goes on: a fresh editor on it creates the document.
            await ws.send(auth("gone", ADMIN))
            assert (await s.next("gone", hocuspocus.MESSAGE_AUTH))[0] == (
                hocuspocus.AUTH_AUTHENTICATED
            )
            await ws.send(on("gone", sync_update(_editor("fresh").get_update())))
            assert await s.next("gone", hocuspocus.MESSAGE_SYNC_STATUS) == b"\x01"
            await _written(client, "gone", "fresh")
    finally:
        await ws.close()


async def test_an_http_write_creates_it_and_the_memory_is_forgotten(
    server: RunningServer,
) -> None:
    stale = await _create_then_delete(server, "gone", "deleted content")
    async with _admin(server) as client:
        r = await client.post(
            _path("gone") + "/ops", json={"op": "update", "update": b64(stale.get_update())}
        )
        assert r.status_code == 200, r.text
        await _written(client, "gone", "deleted content")
    # The document exists: the editor's copy and edits are written to it as
    # to any, and the first edit written forgets the deletion.
    assert await _y_websocket_sends(server, "gone", stale.get_update()) == (0, "")
    before = stale.get_state()
    stale.get("content", type=Text).insert(0, "kept ")
    assert await _y_websocket_sends(server, "gone", stale.get_update(before)) == (0, "")
    async with _admin(server) as client:
        await _written(client, "gone", "kept deleted content")
    assert len(server.app.service.deleted_ydocs) == 0


async def test_the_memory_ends_after_its_window(server: RunningServer) -> None:
    server.app.service.deleted_ydocs.memory_s = 0.3
    stale = await _create_then_delete(server, "gone", "deleted content")
    await asyncio.sleep(0.5)
    assert await _y_websocket_sends(server, "gone", stale.get_update()) == (0, "")
    async with _admin(server) as client:
        await _written(client, "gone", "deleted content")


async def test_at_most_kept_documents_the_oldest_forgotten(server: RunningServer) -> None:
    server.app.service.deleted_ydocs.kept = 2
    stale = [await _create_then_delete(server, f"d{k}", f"text {k}") for k in range(3)]
    assert len(server.app.service.deleted_ydocs) == 2
    assert await _y_websocket_sends(server, "d2", stale[2].get_update()) == (
        4410,
        "document deleted",
    )
    assert await _y_websocket_sends(server, "d0", stale[0].get_update()) == (0, "")
    async with _admin(server) as client:
        await _written(client, "d0", "text 0")


# -- DeletedYDocs alone ---------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_expiry_by_its_clock() -> None:
    clock = _Clock()
    deleted = DeletedYDocs(memory_s=10.0, now=clock)
    stale = _editor("x")
    deleted.remember("ns", "yd:a", stale.get_state())
    clock.now += 9.9
    assert deleted.brings_back("ns", "yd:a", stale.get_update())
    clock.now += 0.2
    assert not deleted.brings_back("ns", "yd:a", stale.get_update())
    assert len(deleted) == 0


def test_the_bytes_bound_forgets_the_oldest() -> None:
    states = [_editor(str(k)).get_state() for k in range(3)]
    deleted = DeletedYDocs(most_bytes=len(states[0]) + len(states[1]))
    for k, state in enumerate(states):
        deleted.remember("ns", f"yd:{k}", state)
    assert len(deleted) == 2
    assert not deleted.brings_back("ns", "yd:0", _editor("0").get_update())


@pytest.mark.parametrize(
    ("what", "brings_back"),
    [
        ("fresh editor", False),
        ("empty update", False),
        ("not an update", False),
        ("a delete set alone", True),
        ("stale copy", True),
    ],
)
def test_which_updates_bring_it_back(what: str, brings_back: bool) -> None:
    stale = _editor("deleted")
    deleted = DeletedYDocs()
    deleted.remember("ns", "yd:a", stale.get_state())
    before = stale.get_state()
    del stale.get("content", type=Text)[0:2]
    updates = {
        "fresh editor": _editor("new").get_update(),
        "empty update": EMPTY_UPDATE,
        "not an update": b"\xff\xff\xff",
        "a delete set alone": stale.get_update(before),
        "stale copy": stale.get_update(),
    }
    assert deleted.brings_back("ns", "yd:a", updates[what]) is brings_back
    assert not deleted.brings_back("ns", "yd:other", updates[what])
