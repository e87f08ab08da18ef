"""A peer's step 2 that brings nothing new, on a real server, with pycrdt
documents as the peers.

A provider answers our step 1 with what it has beyond our state vector: its
new items and, always, its whole delete set (Yjs sends the delete set in
every diff). So a provider that reconnects to a document with deletions,
with nothing new to say, answers with an update that is not empty and
changes nothing. It must not be written as an op (one more op in the log,
the history and the webhooks per reconnect of every provider, under the
provider's name), and a read-only Hocuspocus provider must be told it is
synced (its ``hasUnsyncedChanges`` stays true otherwise), as Hocuspocus's
own server does.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets
from pycrdt import Doc, Encoder, Text, create_sync_message, handle_sync_message

from syncd.yjs import hocuspocus
from syncd.yjs.protocol import sync_step1, sync_step2
from tests.conftest import RunningServer
from tests.http.support import issue

WAIT_S = 5.0
CRDT = "/v1/namespaces/app/crdts/yd:notes"


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


def _token(headers: dict[str, str]) -> str:
    return headers["authorization"].removeprefix("Bearer ")


async def _seq(client: httpx.AsyncClient, headers: dict[str, str]) -> int:
    r = await client.get(CRDT, headers=headers)
    assert r.status_code == 200, r.text
    return int(r.json()["seq"])


async def _written_with_deletions(
    server: RunningServer, client: httpx.AsyncClient, headers: dict[str, str]
) -> Doc[Any]:
    """yd:notes written by a provider, with deletions; a copy of it as a
    provider that synced it keeps it."""
    doc: Doc[Any] = Doc()
    text = doc.get("content", type=Text)
    text.insert(0, "hello brave new world")
    del text[6:12]
    text.insert(0, ">> ")
    del text[0:1]
    ws = await websockets.connect(
        f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/notes?token={_token(headers)}"
    )
    await ws.send(sync_step2(doc.get_update()))
    await ws.close()
    for _ in range(int(WAIT_S / 0.02)):
        r = await client.get(f"{CRDT}?root=content&as=text", headers=headers)
        if r.status_code == 200 and r.json()["value"] == str(text):
            break
        await asyncio.sleep(0.02)
    copy: Doc[Any] = Doc()
    copy.apply_update(doc.get_update())
    return copy


async def _reconnect(server: RunningServer, token: str, doc: Doc[Any]) -> Any:
    """A y-websocket provider holding ``doc`` reconnects: its step 1, and its
    step 2 to ours; returns once the server's step 2 came."""
    ws = await websockets.connect(
        f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/notes?token={token}"
    )
    await ws.send(create_sync_message(doc))
    while True:
        message = await asyncio.wait_for(ws.recv(), WAIT_S)
        if message[:2] == b"\x00\x00":  # our step 1: the provider answers it
            reply = handle_sync_message(message[1:], doc)
            assert reply is not None and reply[:2] == b"\x00\x01" and len(reply) > 4
            await ws.send(reply)
        elif message[:2] == b"\x00\x01":
            return ws


async def test_a_reconnect_with_nothing_new_writes_nothing(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    headers = await issue(client)
    copy = await _written_with_deletions(server, client, headers)
    before = await _seq(client, headers)
    for _ in range(3):
        ws = await _reconnect(server, _token(headers), copy)
        await ws.send(b"\x03")  # a query of awareness: answered after the step 2
        await ws.close()
    await asyncio.sleep(0.2)
    assert await _seq(client, headers) == before
    # A step 2 that does bring something is written.
    del copy.get("content", type=Text)[0:2]  # made while offline
    ws = await _reconnect(server, _token(headers), copy)
    for _ in range(int(WAIT_S / 0.02)):
        if await _seq(client, headers) == before + 1:
            break
        await asyncio.sleep(0.02)
    assert await _seq(client, headers) == before + 1
    r = await client.get(f"{CRDT}?root=content&as=text", headers=headers)
    assert r.json()["value"] == str(copy.get("content", type=Text))
    await ws.close()


def _string(text: str) -> bytes:
    encoder = Encoder()
    encoder.write_var_string(text)
    return encoder.to_bytes()


async def _hocuspocus_status(server: RunningServer, token: str, doc: Doc[Any]) -> bytes:
    """A Hocuspocus provider holding ``doc`` authenticates yd:notes and
    answers our step 1 with its step 2: the sync status it gets."""
    ws = await websockets.connect(f"ws://127.0.0.1:{server.port}/v1/namespaces/app/hocuspocus")
    name = _string("notes")
    await ws.send(name + b"\x02\x00" + _string(token) + _string("3.4.4"))
    await ws.send(name + sync_step1(doc.get_state()))
    try:
        while True:
            got, kind, rest = hocuspocus.parse(await asyncio.wait_for(ws.recv(), WAIT_S))
            if got == "notes" and kind == 0 and rest[:1] == b"\x00":  # our step 1
                reply = handle_sync_message(rest, doc)
                assert reply is not None and len(reply) > 4
                await ws.send(name + reply)
            elif got == "notes" and kind == hocuspocus.MESSAGE_SYNC_STATUS:
                return rest
    finally:
        await ws.close()


async def test_a_read_only_hocuspocus_provider_with_nothing_new_is_told_it_is_synced(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    headers = await issue(client)
    copy = await _written_with_deletions(server, client, headers)
    reader = _token(await issue(client, client_id=8, write=[]))
    assert await _hocuspocus_status(server, reader, copy) == b"\x01"
    # With something new it is not applied, and says so.
    copy.get("content", type=Text).insert(0, "forged ")
    assert await _hocuspocus_status(server, reader, copy) == b"\x00"
    r = await client.get(f"{CRDT}?root=content&as=text", headers=headers)
    assert "forged" not in r.json()["value"]


async def test_a_hocuspocus_resync_is_answered_with_our_step1_too(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    """A Hocuspocus provider's ``forceSync()`` (and ``forceSyncInterval``)
    sends a step 1 and counts one unsynced change, which the acknowledgement
    of its step 2 to our step 1 takes back; Hocuspocus's server follows each
    step 2 with its step 1. Without it, ``hasUnsyncedChanges`` stayed true."""
    headers = await issue(client)
    copy = await _written_with_deletions(server, client, headers)
    ws = await websockets.connect(f"ws://127.0.0.1:{server.port}/v1/namespaces/app/hocuspocus")
    name = _string("notes")

    async def next_sync() -> bytes:
        while True:
            got, kind, rest = hocuspocus.parse(await asyncio.wait_for(ws.recv(), WAIT_S))
            if got == "notes" and kind == 0:
                return rest

    await ws.send(name + b"\x02\x00" + _string(_token(headers)) + _string("3.4.4"))
    await ws.send(name + sync_step1(copy.get_state()))
    opening = [(await next_sync())[:1], (await next_sync())[:1]]
    assert sorted(opening) == [b"\x00", b"\x01"]  # our step 1, our step 2
    await ws.send(name + sync_step1(copy.get_state()))  # forceSync()
    assert (await next_sync())[:1] == b"\x01"
    step1 = await next_sync()
    assert step1[:1] == b"\x00"
    reply = handle_sync_message(step1, copy)
    assert reply is not None
    await ws.send(name + reply)
    while True:
        got, kind, rest = hocuspocus.parse(await asyncio.wait_for(ws.recv(), WAIT_S))
        if kind == hocuspocus.MESSAGE_SYNC_STATUS:
            assert rest == b"\x01"
            break
    await ws.close()


async def test_at_the_size_limit_a_provider_with_nothing_new_still_connects(
    make_server: Any,
) -> None:
    """A document at ``SERVICE_MAX_CRDT_BYTES`` refuses every op. The step 2
    of a provider with nothing new was one: each provider whose document had
    deletions was closed 1007 ``crdt_too_large`` as it connected, and
    reconnected, for good: the document could not even be read over Yjs."""
    server: RunningServer = await make_server(max_crdt_bytes=4096)
    async with httpx.AsyncClient(base_url=server.url) as client:
        headers = await issue(client)
        doc: Doc[Any] = Doc()
        text = doc.get("content", type=Text)
        text.insert(0, "x" * 300)
        for i in range(30):
            del text[i * 5 : i * 5 + 2]
        update = doc.get_update()
        updates: list[bytes] = []
        doc.observe(lambda event: updates.append(event.update))
        while True:
            body = {"op": "update", "update": base64.b64encode(update).decode()}
            r = await client.post(f"{CRDT}/ops", headers=headers, json=body)
            if r.status_code == 413:
                break
            assert r.status_code == 200, r.text
            text.insert(len(text), "y" * 40)
            update = updates[-1]  # this transaction's update: no delete set
        held: Doc[Any] = Doc()
        r = await client.get(CRDT, headers=headers)
        held.apply_update(base64.b64decode(r.json()["value"]))
    ws = await _reconnect(server, _token(headers), held)
    with pytest.raises(TimeoutError):  # not closed
        while True:
            await asyncio.wait_for(ws.recv(), 0.5)
    assert ws.close_code is None
    await ws.close()


async def test_a_step2_nested_too_deep_for_yrs_is_refused_and_the_server_lives(
    spawn_server: Any,
) -> None:
    """Whether a peer's step 2 brings anything new was asked of Yrs
    (get_update) before the update was checked: Yrs decodes a value by
    recursion on the native stack, and arrays in arrays 30,000 deep (60 KB)
    killed the server. Now it is refused as any write of it is. In a server
    of its own: before the fix it died."""
    server = spawn_server({})
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        headers = await issue(client)
        doc: Doc[Any] = Doc()
        doc.get("content", type=Text).insert(0, "hello")
        r = await client.post(
            f"{CRDT}/ops",
            json={"op": "update", "update": base64.b64encode(doc.get_update()).decode()},
            headers=headers,
        )
        assert r.status_code == 200, r.text
        deep = (
            bytes([1, 1, 4, 0, 0x28, 1, 1])
            + b"m"
            + bytes([1])
            + b"k"
            + bytes([1])
            + bytes([117, 1]) * 30_000
            + bytes([126, 0])
        )  # root map "m", key "k": [[…[null]…]]
        ws = await websockets.connect(
            f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/notes?token={_token(headers)}"
        )
        try:
            while (await asyncio.wait_for(ws.recv(), WAIT_S))[:2] != b"\x00\x00":
                pass  # until our step 1, which the step 2 answers
            await ws.send(sync_step2(deep))
            await asyncio.sleep(0.5)
        finally:
            await ws.close()
        assert server.proc.poll() is None, server.log()
        r = await client.get(f"{CRDT}?root=m&as=map", headers=headers)
        assert r.status_code == 200 and r.json()["value"] == {}, r.text
