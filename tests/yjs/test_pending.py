"""An update whose dependency has not arrived is pending in Yrs, and
pycrdt's get_update() leaves pending updates out (Yjs's encodeStateAsUpdate
has them): a provider that joined while one waited never got it. On a real
server, with pycrdt providers over y-websocket."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import httpx
import websockets
from pycrdt import Decoder, Doc, Text, create_sync_message, create_update_message

from syncd.yjs.protocol import sync_step1
from tests.conftest import RunningServer
from tests.crdt.crdt_testlib import dependent_updates
from tests.crdt.test_ydoc import STUCK_DELIVERY, STUCK_SEED, two_writers
from tests.http.support import issue

WAIT_S = 5.0
CRDT = "/v1/namespaces/app/crdts/yd:notes"


async def _step2(ws: Any) -> bytes:
    """The update of the server's next sync step 2 (message 0, step 1)."""
    while True:
        message = await asyncio.wait_for(ws.recv(), WAIT_S)
        if message[:2] == b"\x00\x01":
            return bytes(Decoder(message[2:]).read_message() or b"")


async def _seq(client: httpx.AsyncClient, headers: dict[str, str], seq: int) -> None:
    for _ in range(250):
        if (await client.get(CRDT, headers=headers)).json().get("seq", 0) >= seq:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"seq {seq} never reached")


async def test_a_provider_that_joins_while_an_update_waits_gets_it(server: RunningServer) -> None:
    _, first, second = dependent_updates()
    async with httpx.AsyncClient(base_url=server.url) as client:
        headers = await issue(client)
        token = headers["authorization"].removeprefix("Bearer ")
        url = f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/notes?token={token}"
        async with websockets.connect(url) as sender:
            await sender.send(create_sync_message(Doc()))
            await sender.send(create_update_message(second))  # its dependency never sent
            await _seq(client, headers, 1)
        for state_vector in (b"\x00", Doc(client_id=5).get_state()):
            async with websockets.connect(url) as joiner:
                await joiner.send(sync_step1(state_vector))
                got = await _step2(joiner)
            reader: Doc[Any] = Doc()
            reader.apply_update(got)
            assert str(reader.get("content", type=Text)) == ""  # waits, as on the server
            reader.apply_update(first)  # the dependency comes: both integrate
            assert str(reader.get("content", type=Text)) == "hello world", state_vector
        # Once the dependency reaches the server, it is integrated there too.
        body = {"op": "update", "update": base64.b64encode(first).decode()}
        r = await client.post(f"{CRDT}/ops", headers=headers, json=body)
        assert r.status_code == 200, r.text
        r = await client.get(f"{CRDT}?root=content", headers=headers)
        assert r.json()["value"] == "hello world"


async def test_a_deletion_that_waits_for_its_items_reaches_a_joiner(server: RunningServer) -> None:
    """The same for a delete set whose items have not arrived (Yrs's pending
    delete set)."""
    writer, first, _ = dependent_updates()
    text = writer.get("content", type=Text)
    state = writer.get_state()
    del text[0:6]  # "hello " of "hello world"
    deletion = writer.get_update(state)
    assert deletion[:1] == b"\x00"  # a delete set alone
    async with httpx.AsyncClient(base_url=server.url) as client:
        headers = await issue(client)
        token = headers["authorization"].removeprefix("Bearer ")
        url = f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/notes?token={token}"
        async with websockets.connect(url) as sender:
            await sender.send(create_sync_message(Doc()))
            await sender.send(create_update_message(deletion))  # before what it deletes
            await _seq(client, headers, 1)
        async with websockets.connect(url) as joiner:
            await joiner.send(sync_step1(b"\x00"))
            got = await _step2(joiner)
        reader: Doc[Any] = Doc()
        reader.apply_update(got)
        reader.apply_update(first)  # "hello": its first five characters deleted
        assert str(reader.get("content", type=Text)) == ""


async def test_updates_that_wait_count_against_the_size_limit(make_server: Any) -> None:
    """A measured size leaves pending updates out: after one update was
    refused at SERVICE_MAX_CRDT_BYTES, every later update of that writer
    depends on it and waits, and they were all accepted (300 updates of 100
    characters into a 4096-byte document, its usage still under 4096).
    Pending bytes now count as held."""
    server: RunningServer = await make_server(max_crdt_bytes=4096, rate_limit=100_000)
    async with httpx.AsyncClient(base_url=server.url) as client:
        headers = await issue(client)
        doc: Doc[Any] = Doc()
        text = doc.get("content", type=Text)
        statuses: list[int] = []
        for _ in range(300):
            state = doc.get_state()
            # 400 characters until one is refused (kept locally: what
            # follows depends on it), then 100, which fit beside the measure.
            text.insert(len(text), "y" * (100 if 413 in statuses else 400))
            body = {"op": "update", "update": base64.b64encode(doc.get_update(state)).decode()}
            r = await client.post(f"{CRDT}/ops", headers=headers, json=body)
            statuses.append(r.status_code)
            if r.status_code == 413 and statuses.count(413) == 2:
                break
            assert r.status_code in (200, 413), r.text
        assert statuses[-1] == 413 and statuses.count(413) == 2, statuses
        # Past the first refusal, the updates that wait fit in what is left.
        assert len(statuses) - statuses.index(413) < 45, statuses


async def test_updates_that_one_update_lets_in_are_all_integrated(
    make_server: Any, tmp_path: Path
) -> None:
    """Two writers' updates reach the server out of order, each once (over
    HTTP here; a provider's take the same path). When one update lets in two
    that wait, Yrs can keep one of them waiting although nothing it needs is
    missing. Before: the server's document lacked it for good (and a
    snapshot left it out)."""
    updates = two_writers(len(STUCK_DELIVERY), STUCK_SEED)
    in_order: Doc[Any] = Doc()
    for update in updates:
        in_order.apply_update(update)
    data_dir = tmp_path / "kept"
    server: RunningServer = await make_server(data_dir=data_dir)
    async with httpx.AsyncClient(base_url=server.url) as client:
        headers = await issue(client)
        for i in STUCK_DELIVERY:
            body = {"op": "update", "update": base64.b64encode(updates[i]).decode()}
            r = await client.post(f"{CRDT}/ops", headers=headers, json=body)
            assert r.status_code == 200, r.text
        await _served_as(client, headers, in_order)
    await server.server.shutdown()  # a clean stop snapshots the document
    again: RunningServer = await make_server(data_dir=data_dir)
    async with httpx.AsyncClient(base_url=again.url) as client:
        await _served_as(client, headers, in_order)


async def _served_as(client: httpx.AsyncClient, headers: dict[str, str], doc: Doc[Any]) -> None:
    read = (await client.get(CRDT, headers=headers)).json()
    served: Doc[Any] = Doc()
    served.apply_update(base64.b64decode(read["value"]))
    assert served.get_state() == doc.get_state()
    assert str(served.get("content", type=Text)) == str(doc.get("content", type=Text))
