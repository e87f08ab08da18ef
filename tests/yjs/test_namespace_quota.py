"""Yjs documents of a namespace at SERVICE_NAMESPACE_MAX_BYTES, on a real
server with pycrdt providers: growth is refused (403 quota_exceeded over
HTTP, close 1008 over y-websocket), an update that only deletes what the
document holds is applied within the headroom, so a full namespace can
shrink its documents, and a refusal is on the measured state, not the
bound counted since the last measure."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import httpx
import pytest
import websockets
from pycrdt import (
    Doc,
    Encoder,
    Map,
    Text,
    create_sync_message,
    create_update_message,
    handle_sync_message,
)

from syncd.yjs.protocol import awareness_message
from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS, issue

NS_LIMIT = 6000
BASE = "/v1/namespaces/app/crdts"
WAIT_S = 5.0


def _b64(update: bytes) -> str:
    return base64.b64encode(update).decode()


def _change(doc: Doc[Any], edit: Any) -> bytes:
    before = doc.get_state()
    edit()
    return doc.get_update(before)


async def _usage(client: httpx.AsyncClient) -> dict[str, Any]:
    r = await client.get("/v1/namespaces/app/usage", headers=ADMIN_HEADERS)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def _post(
    client: httpx.AsyncClient, h: dict[str, str], crdt_id: str, update: bytes
) -> httpx.Response:
    body = {"op": "update", "update": _b64(update)}
    return await client.post(f"{BASE}/{crdt_id}/ops", headers=h, json=body)


async def _read(client: httpx.AsyncClient, h: dict[str, str], crdt_id: str) -> dict[str, Any]:
    r = await client.get(f"{BASE}/{crdt_id}", headers=h)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def _copy(client: httpx.AsyncClient, h: dict[str, str], crdt_id: str) -> Doc[Any]:
    doc: Doc[Any] = Doc()
    doc.apply_update(base64.b64decode((await _read(client, h, crdt_id))["value"]))
    return doc


async def _fill(client: httpx.AsyncClient, h: dict[str, str], crdt_id: str) -> Doc[Any]:
    """``crdt_id`` written until the namespace refuses even one character
    (403 quota_exceeded), and a provider's copy of it."""
    doc: Doc[Any] = Doc()
    for size in (300, 50, 5, 1):  # each until refused: full to a few bytes
        while True:
            text = doc.get("content", type=Text)
            r = await _post(
                client, h, crdt_id, _change(doc, lambda t=text, n=size: t.insert(len(t), "y" * n))
            )
            if r.status_code != 200:
                assert r.status_code == 403 and r.json()["error"] == "quota_exceeded", r.text
                assert "SERVICE_NAMESPACE_MAX_BYTES" in r.json()["message"]
                doc = await _copy(client, h, crdt_id)
                break
    return doc


def _trim(doc: Doc[Any], ranges: int = 3) -> bytes:
    """A deletion of about half the document's text, in ``ranges`` ranges."""
    text = doc.get("content", type=Text)

    def cut() -> None:
        with doc.transaction():
            part = len(text) // ranges
            for k in range(ranges - 1, -1, -1):
                del text[k * part : k * part + part // 2]

    update = _change(doc, cut)
    assert update[:1] == b"\x00"  # no items: a delete set alone
    return update


async def _closed(ws: Any) -> Any:
    with pytest.raises(websockets.ConnectionClosed) as closed:
        while True:
            await asyncio.wait_for(ws.recv(), WAIT_S)
    return closed.value.rcvd


async def _seq_reaches(
    client: httpx.AsyncClient, h: dict[str, str], crdt_id: str, seq: int
) -> dict[str, Any]:
    for _ in range(250):
        read = await _read(client, h, crdt_id)
        if read["seq"] >= seq:
            return read
        await asyncio.sleep(0.02)
    raise AssertionError(f"seq {seq} never reached")


async def test_a_full_namespace_shrinks_its_yjs_documents_over_http(make_server: Any) -> None:
    """Before: the deletion was refused with 403 quota_exceeded like any
    update, so a namespace at its quota could never shrink a Yjs document."""
    server: RunningServer = await make_server(namespace_max_bytes=NS_LIMIT, rate_limit=100_000)
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        doc = await _fill(client, h, "yd:notes")
        seq = (await _read(client, h, "yd:notes"))["seq"]
        full = (await _usage(client))["bytes"]
        text = doc.get("content", type=Text)

        r = await _post(client, h, "yd:notes", _trim(doc))
        assert r.status_code == 200, r.text
        served = await _copy(client, h, "yd:notes")
        assert str(served.get("content", type=Text)) == str(text)
        assert (await _read(client, h, "yd:notes"))["seq"] == seq + 1
        # The namespace has room again, as measured: new text goes in, and
        # the usage shows the document smaller than it was.
        r = await _post(client, h, "yd:notes", _change(doc, lambda: text.insert(0, "again")))
        assert r.status_code == 200, r.text
        assert (await _usage(client))["bytes"] < full * 3 // 4


async def test_at_namespace_quota_growth_and_deletions_of_what_it_lacks_are_refused(
    make_server: Any,
) -> None:
    server: RunningServer = await make_server(namespace_max_bytes=NS_LIMIT, rate_limit=100_000)
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        doc = await _fill(client, h, "yd:notes")
        seq = (await _read(client, h, "yd:notes"))["seq"]
        # A deletion of items the document does not have (Yrs would hold it
        # as pending, which grows the document).
        other: Doc[Any] = Doc()
        other_text = other.get("content", type=Text)
        other_text.insert(0, "q" * 50)

        def every_other() -> None:
            with other.transaction():
                for i in range(48, -1, -2):
                    del other_text[i : i + 1]

        ghost = _change(other, every_other)
        assert ghost[:1] == b"\x00"
        # A deletion with an item riding along.
        text = doc.get("content", type=Text)

        def both() -> None:
            with doc.transaction():
                del text[0:10]
                doc.get("meta", type=Map)["k"] = "v" * 40

        for update in (ghost, _change(doc, both)):
            r = await _post(client, h, "yd:notes", update)
            assert r.status_code == 403 and r.json()["error"] == "quota_exceeded", r.text
        # A new document in the full namespace.
        fresh: Doc[Any] = Doc()
        r = await _post(
            client, h, "yd:other", _change(fresh, lambda: fresh.get("t", type=Text).insert(0, "x"))
        )
        assert r.status_code == 403 and r.json()["error"] == "quota_exceeded", r.text
        assert (await _read(client, h, "yd:notes"))["seq"] == seq


async def test_a_full_namespace_shrinks_its_yjs_documents_over_y_websocket(
    make_server: Any,
) -> None:
    """Before: the deletion closed the provider with 1008 quota_exceeded."""
    server: RunningServer = await make_server(namespace_max_bytes=NS_LIMIT, rate_limit=100_000)
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        token = h["authorization"].removeprefix("Bearer ")
        url = f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/notes?token={token}"
        doc = await _fill(client, h, "yd:notes")
        seq = (await _read(client, h, "yd:notes"))["seq"]
        text = doc.get("content", type=Text)

        # New items at the quota: refused, the connection closed.
        async with websockets.connect(url) as ws:
            await ws.send(create_sync_message(doc))
            await ws.send(create_update_message(_change(doc, lambda: text.insert(0, "z" * 50))))
            rcvd = await _closed(ws)
        assert rcvd.code == 1008 and "quota_exceeded" in rcvd.reason
        assert (await _read(client, h, "yd:notes"))["seq"] == seq
        doc = await _copy(client, h, "yd:notes")
        text = doc.get("content", type=Text)

        async with websockets.connect(url) as ws:
            await ws.send(create_sync_message(doc))
            await ws.send(create_update_message(_trim(doc, ranges=5)))
            await _seq_reaches(client, h, "yd:notes", seq + 1)
            served = await _copy(client, h, "yd:notes")
            assert str(served.get("content", type=Text)) == str(text)
            # Trimmed, it takes new text again, on the same connection.
            await ws.send(create_update_message(_change(doc, lambda: text.insert(0, "again"))))
            read = await _seq_reaches(client, h, "yd:notes", seq + 2)
            assert read["seq"] == seq + 2
            assert ws.close_code is None


async def test_a_namespace_refuses_on_the_measured_size_of_a_yjs_document(
    make_server: Any,
) -> None:
    """A document typed into and emptied again stays small, while the bound
    counted for its updates (each one's encoding and 64 bytes) grows until
    it is measured (at 4 KiB counted). Before: the namespace check refused
    on that bound without measuring, so a namespace holding half its quota
    refused a one-character update."""
    server: RunningServer = await make_server(namespace_max_bytes=NS_LIMIT, rate_limit=100_000)
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        big: Doc[Any] = Doc()
        r = await _post(
            client, h, "yd:big", _change(big, lambda: big.get("t", type=Text).insert(0, "b" * 2200))
        )
        assert r.status_code == 200, r.text
        doc: Doc[Any] = Doc()
        text = doc.get("content", type=Text)
        for _ in range(3):  # about 3 * 1000 bytes counted: the quota, with yd:big
            r = await _post(client, h, "yd:notes", _change(doc, lambda: text.insert(0, "w" * 600)))
            assert r.status_code == 200, r.text
            empty = _change(doc, lambda: text.__delitem__(slice(0, len(text))))
            r = await _post(client, h, "yd:notes", empty)
            assert r.status_code == 200, r.text
        r = await _post(client, h, "yd:notes", _change(doc, lambda: text.insert(0, "w")))
        assert r.status_code == 200, r.text
        assert (await _usage(client))["bytes"] < NS_LIMIT * 2 // 3


def _awareness(client_id: int, state: str) -> bytes:
    encoder = Encoder()
    encoder.write_var_uint(1)
    encoder.write_var_uint(client_id)
    encoder.write_var_uint(1)
    encoder.write_var_string(state)
    return awareness_message(encoder.to_bytes())


async def _resync(ws: Any, doc: Doc[Any]) -> None:
    """A provider's opening: its step 1, and its step 2 (all it has: nothing
    new to the server) in answer to the server's step 1."""
    await ws.send(create_sync_message(doc))
    while True:
        message = await asyncio.wait_for(ws.recv(), WAIT_S)
        if message[:2] == b"\x00\x00":  # the server's step 1
            reply = handle_sync_message(message[1:], doc)
            assert reply is not None
            await ws.send(reply)
            return


async def _until(ws: Any, wanted: bytes) -> None:
    while wanted not in await asyncio.wait_for(ws.recv(), WAIT_S):
        pass


async def test_at_namespace_quota_providers_reconnect_and_share_cursors(
    make_server: Any,
) -> None:
    """A full namespace keeps serving its Yjs documents: a provider that
    reconnects with what the document already holds (its step 2: the whole
    delete set, nothing new) is not refused, awareness (never stored) is
    relayed as ever, and an update of items the document has is applied."""
    server: RunningServer = await make_server(namespace_max_bytes=NS_LIMIT, rate_limit=100_000)
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        token = h["authorization"].removeprefix("Bearer ")
        url = f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/notes?token={token}"
        doc = await _fill(client, h, "yd:notes")
        r = await _post(client, h, "yd:notes", _trim(doc))  # a delete set to resend
        assert r.status_code == 200, r.text
        seq = (await _read(client, h, "yd:notes"))["seq"]
        async with websockets.connect(url) as watcher, websockets.connect(url) as editor:
            for ws in (watcher, editor):
                await _resync(ws, doc)
            await editor.send(_awareness(4242, '{"user":"at quota"}'))
            await _until(watcher, b"at quota")
            # Updates that bring again what the document has (a provider
            # passing on what it loaded from its own storage, as y-indexeddb
            # makes y-websocket do): applied, as a deletion of its delete set
            # would be. Before: closed 1008 quota_exceeded.
            await editor.send(create_update_message(doc.get_update()))
            read = await _seq_reaches(client, h, "yd:notes", seq + 1)
            assert read["seq"] == seq + 1
            assert watcher.close_code is None and editor.close_code is None


async def test_at_namespace_quota_a_revert_that_only_deletes_passes(make_server: Any) -> None:
    """Reverting an agent's insertions into a full namespace deletes them:
    it passes as a deletion, and the namespace has room again once it is
    measured. A revert that would bring text back is refused like growth."""
    server: RunningServer = await make_server(namespace_max_bytes=NS_LIMIT, rate_limit=100_000)
    async with httpx.AsyncClient(base_url=server.url) as client:
        human = await issue(client, client_id=7)
        agent = await issue(client, client_id=9)
        doc = await _fill(client, agent, "yd:notes")
        r = await client.post(f"{BASE}/yd:notes/revert", json={"client_id": 9}, headers=human)
        assert r.status_code == 200, r.text
        assert r.json()["applied"] == 1
        assert str((await _copy(client, human, "yd:notes")).get("content", type=Text)) == ""
        # Taking the revert back would bring it all back: refused.
        r = await client.post(f"{BASE}/yd:notes/revert", json={"origin": "revert"}, headers=human)
        assert r.status_code == 403 and r.json()["error"] == "quota_exceeded", r.text
        assert str(doc.get("content", type=Text))  # the agent's copy still has it


def _waiting_update(size: int) -> bytes:
    """An update of ``size`` characters that waits for ever: the second of
    a writer's two, its first never sent."""
    doc: Doc[Any] = Doc()
    text = doc.get("content", type=Text)
    text.insert(0, "a")
    return _change(doc, lambda: text.insert(1, "w" * size))


async def test_updates_that_wait_in_many_documents_count_against_the_namespace(
    make_server: Any,
) -> None:
    """What a Yjs document holds as pending is in no measure of its size; its
    own ops count it, and the namespace check counts every document's.
    Before: each document's check counted its own alone, so a namespace of
    6000 bytes took 1500 bytes of waiting updates in each of ten documents."""
    server: RunningServer = await make_server(namespace_max_bytes=NS_LIMIT, rate_limit=100_000)
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        statuses = [
            (await _post(client, h, f"yd:w{i}", _waiting_update(1500))).status_code
            for i in range(10)
        ]
        taken = statuses.count(200)
        assert taken * 1500 <= NS_LIMIT, statuses
        assert taken and set(statuses[taken:]) == {403}, statuses
