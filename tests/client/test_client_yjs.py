"""syncd.client.yjs.YjsProvider: pycrdt documents kept in sync through syncd."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from pycrdt import Doc, Text

from syncd.client.yjs import YjsProvider
from tests.conftest import RunningServer
from tests.http.support import issue

WAIT_S = 5.0


async def _eventually(check: Any) -> None:
    for _ in range(int(WAIT_S / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    assert check()


async def _token(server: RunningServer, **kwargs: Any) -> str:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client, **kwargs)
    return h["authorization"].removeprefix("Bearer ")


async def test_two_providers_converge_and_see_each_others_awareness(
    server: RunningServer,
) -> None:
    token = await _token(server)
    a_doc: Doc[Any] = Doc()
    b_doc: Doc[Any] = Doc()
    async with (
        YjsProvider(server.url, "app", "notes", a_doc, token) as a,
        YjsProvider(server.url, "app", "notes", b_doc, token) as b,
    ):
        await asyncio.wait_for(a.synced.wait(), WAIT_S)
        await asyncio.wait_for(b.synced.wait(), WAIT_S)
        a_text, b_text = a_doc.get("content", type=Text), b_doc.get("content", type=Text)
        for i in range(10):
            a_text.insert(0, "a")
            b_text.insert(len(str(b_text)), str(i))
        await _eventually(lambda: str(a_text) == str(b_text) and len(str(a_text)) == 20)
        a.set_awareness({"user": {"name": "ada"}})
        await _eventually(lambda: {"user": {"name": "ada"}} in b.awareness.values())
        a.set_awareness(None)
        await _eventually(lambda: not b.awareness)


async def test_awareness_is_renewed_while_set(server: RunningServer) -> None:
    token = await _token(server)
    a_doc: Doc[Any] = Doc()
    async with (
        YjsProvider(server.url, "app", "renew", a_doc, token, awareness_renew_s=0.2) as a,
        YjsProvider(server.url, "app", "renew", Doc(), token) as b,
    ):
        await asyncio.wait_for(a.synced.wait(), WAIT_S)
        await asyncio.wait_for(b.synced.wait(), WAIT_S)
        a.set_awareness({"user": {"name": "ada"}})
        await _eventually(lambda: a_doc.client_id in b.clocks)
        first = b.clocks[a_doc.client_id]
        # Nothing else is sent: only the renewal moves the clock on.
        await _eventually(lambda: b.clocks[a_doc.client_id] >= first + 2)
        a.set_awareness(None)
        await _eventually(lambda: not b.awareness)
        left = b.clocks[a_doc.client_id]
        await asyncio.sleep(0.5)
        assert b.clocks[a_doc.client_id] == left  # no renewal of a cleared state


async def test_edits_made_while_disconnected_are_merged_on_reconnect(
    server: RunningServer,
) -> None:
    token = await _token(server)
    doc: Doc[Any] = Doc()
    text = doc.get("content", type=Text)
    text.insert(0, "offline ")  # before any connection
    async with YjsProvider(server.url, "app", "notes", doc, token) as provider:
        await asyncio.wait_for(provider.synced.wait(), WAIT_S)
        other: Doc[Any] = Doc()
        async with YjsProvider(server.url, "app", "notes", other, token) as second:
            await asyncio.wait_for(second.synced.wait(), WAIT_S)
            await _eventually(lambda: str(other.get("content", type=Text)) == "offline ")


async def test_a_read_only_token_is_told_and_changes_nothing(server: RunningServer) -> None:
    writer_doc: Doc[Any] = Doc()
    reader_doc: Doc[Any] = Doc()
    writer_token = await _token(server)
    reader_token = await _token(server, client_id=9, write=[])
    async with (
        YjsProvider(server.url, "app", "notes", writer_doc, writer_token) as writer,
        YjsProvider(server.url, "app", "notes", reader_doc, reader_token) as reader,
    ):
        await asyncio.wait_for(writer.synced.wait(), WAIT_S)
        await asyncio.wait_for(reader.synced.wait(), WAIT_S)
        writer_doc.get("content", type=Text).insert(0, "real")
        await _eventually(lambda: str(reader_doc.get("content", type=Text)) == "real")
        reader_doc.get("content", type=Text).insert(0, "fake ")
        await _eventually(lambda: reader.denied is not None)
        await asyncio.sleep(0.1)
        assert str(writer_doc.get("content", type=Text)) == "real"


async def test_a_refused_handshake_stops_with_the_status(server: RunningServer) -> None:
    provider = YjsProvider(server.url, "app", "notes", Doc(), "bad-token")
    provider.start()
    await _eventually(lambda: provider.refused == 401)
    await provider.close()
