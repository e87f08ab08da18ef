"""The y-websocket endpoint over a real socket, with pycrdt documents as the
clients: sync, concurrent edits, read-only tokens, awareness, bad input."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets
from pycrdt import (
    Doc,
    Text,
    YMessageType,
    create_sync_message,
    create_update_message,
    handle_sync_message,
)

from syncd.yjs.protocol import awareness_message
from syncd.yjs.room import MAX_AWARENESS_CLIENTS
from tests.conftest import RunningServer
from tests.http.support import issue

WAIT_S = 5.0
CRDTS = "/v1/namespaces/app/crdts"


def _token(headers: dict[str, str]) -> str:
    return headers["authorization"].removeprefix("Bearer ")


class Peer:
    """A pycrdt document synced through one y-websocket connection."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.doc: Doc[Any] = Doc()
        self.text = self.doc.get("content", type=Text)
        self.awareness: list[bytes] = []
        self.denied = False
        self.synced = asyncio.Event()
        self._reader = asyncio.create_task(self._read())
        self._sub = self.doc.observe(self._local)
        self._applying = False

    def _local(self, event: Any) -> None:
        if not self._applying:
            asyncio.get_running_loop().create_task(
                self.ws.send(create_update_message(event.update))
            )

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                assert isinstance(message, bytes)
                if message[0] == YMessageType.SYNC:
                    self._applying = True
                    try:
                        reply = handle_sync_message(message[1:], self.doc)
                    finally:
                        self._applying = False
                    if reply is not None:
                        await self.ws.send(reply)
                    if message[1] == 1:  # step 2: the server's answer to our step 1
                        self.synced.set()
                elif message[0] == YMessageType.AWARENESS:
                    self.awareness.append(message)
                elif message[0] == 2:
                    self.denied = True
        except websockets.ConnectionClosed:
            pass

    async def start(self) -> Peer:
        await self.ws.send(create_sync_message(self.doc))
        await asyncio.wait_for(self.synced.wait(), WAIT_S)
        return self

    async def close(self) -> None:
        await self.ws.close()
        await self._reader


async def _peer(server: RunningServer, token: str, room: str = "notes") -> Peer:
    ws = await websockets.connect(
        f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/{room}?token={token}"
    )
    return await Peer(ws).start()


async def _eventually(check: Any) -> None:
    for _ in range(int(WAIT_S / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    assert check()


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


async def test_two_providers_edit_concurrently_and_converge(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    token = _token(await issue(client))
    a = await _peer(server, token)
    b = await _peer(server, token)
    for i in range(20):
        a.text.insert(0, "a")
        b.text.insert(len(str(b.text)), f"b{i}")
        if i % 5 == 0:
            await asyncio.sleep(0)
    await _eventually(lambda: str(a.text) == str(b.text) and len(str(a.text)) == 20 + 50)
    # The server holds the same document, durable, as a JSON view and as an update.
    h = {"authorization": f"Bearer {token}"}
    view = (await client.get(f"{CRDTS}/yd:notes?root=content&as=text", headers=h)).json()
    assert view["value"] == str(a.text)
    full = (await client.get(f"{CRDTS}/yd:notes", headers=h)).json()
    fresh: Doc[Any] = Doc()
    fresh.apply_update(base64.b64decode(full["value"]))
    assert str(fresh.get("content", type=Text)) == str(a.text)
    # A third provider gets everything at its sync.
    c = await _peer(server, token)
    assert str(c.text) == str(a.text)
    for p in (a, b, c):
        await p.close()


async def test_offline_edits_merge_on_reconnect_and_survive_a_restart(
    make_server: Any, tmp_path: Any
) -> None:
    data_dir = tmp_path / "data"
    server: RunningServer = await make_server(data_dir=data_dir)
    async with httpx.AsyncClient(base_url=server.url) as client:
        token = _token(await issue(client))
    a = await _peer(server, token)
    a.text.insert(0, "hello")
    await asyncio.sleep(0.2)
    offline: Doc[Any] = Doc()
    offline.apply_update(a.doc.get_update())
    await a.close()
    offline.get("content", type=Text).insert(5, " world")  # made while disconnected
    await server.server.shutdown()

    again: RunningServer = await make_server(data_dir=data_dir)
    b = Peer(
        await websockets.connect(
            f"ws://127.0.0.1:{again.port}/v1/namespaces/app/yjs/notes?token={token}"
        )
    )
    b._applying = True
    b.doc.apply_update(offline.get_update())
    b._applying = False
    await b.start()
    assert str(b.text) == "hello world"
    c = await _peer(again, token)
    await _eventually(lambda: str(c.text) == "hello world")
    for p in (b, c):
        await p.close()


async def test_a_read_only_token_syncs_but_cannot_change_the_document(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    writer = await _peer(server, _token(await issue(client)))
    writer.text.insert(0, "kept")
    reader = await _peer(server, _token(await issue(client, client_id=8, write=[])))
    await _eventually(lambda: str(reader.text) == "kept")
    reader.text.insert(0, "forged ")
    await _eventually(lambda: reader.denied)
    writer.text.insert(4, "!")
    await _eventually(lambda: str(reader.text).endswith("kept!"))
    h = await issue(client)
    view = (await client.get(f"{CRDTS}/yd:notes?root=content&as=text", headers=h)).json()
    assert view["value"] == "kept!"
    assert str(writer.text) == "kept!"
    for p in (writer, reader):
        await p.close()


@pytest.mark.parametrize("token", [None, "not-a-token"])
async def test_no_token_or_a_bad_one_is_refused_at_the_handshake(
    server: RunningServer, token: str | None
) -> None:
    query = f"?token={token}" if token else ""
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/notes{query}")
    assert refused.value.response.status_code == 401


async def test_a_token_without_read_permission_is_refused(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    token = _token(await issue(client, read=["other"], write=[]))
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(
            f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/notes?token={token}"
        )
    assert refused.value.response.status_code == 403


async def test_a_room_of_another_type_is_a_type_mismatch(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    token = _token(await issue(client))
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(
            f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/rg:doc?token={token}"
        )
    assert refused.value.response.status_code == 409


def _awareness(client_id: int, clock: int, state: str) -> bytes:
    from pycrdt import Encoder

    encoder = Encoder()
    encoder.write_var_uint(1)
    encoder.write_var_uint(client_id)
    encoder.write_var_uint(clock)
    encoder.write_var_string(state)
    return awareness_message(encoder.to_bytes())


async def test_awareness_is_relayed_given_to_newcomers_and_leaves_with_the_connection(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    token = _token(await issue(client))
    a = await _peer(server, token)
    b = await _peer(server, token)
    await a.ws.send(_awareness(4242, 1, '{"user":{"name":"ada"}}'))
    await _eventually(lambda: any(b"ada" in m for m in b.awareness))
    c = await _peer(server, token)  # the room's states come with the opening
    await _eventually(lambda: any(b"ada" in m for m in c.awareness))
    before = len(b.awareness)
    await a.close()
    # Its clients are removed: a null state for 4242 reaches the others.
    await _eventually(lambda: len(b.awareness) > before and b.awareness[-1].endswith(b"null"))
    # Never stored: nothing of it in the document.
    assert server.app.engine.get("app", "yd:notes") is None
    for p in (b, c):
        await p.close()


async def test_too_many_awareness_clients_close_with_1008(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    a = await _peer(server, _token(await issue(client)))
    for i in range(MAX_AWARENESS_CLIENTS + 1):
        await a.ws.send(_awareness(1000 + i, 1, "{}"))
    await asyncio.wait_for(a._reader, WAIT_S)
    assert a.ws.close_code == 1008


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (b"\x00\x02\x05\x01\x02", 1002),  # truncated sync message
        (b"\x00\x07\x00", 1002),  # unknown sync step
        (b"\x00\x02\x03\xff\xff\xff", 1007),  # an update Yjs cannot decode
        (b"\x01\x03\x01\x01", 1002),  # truncated awareness
        (b"\x01" + b"\x05" + b"\x01\x01\x01\x01{", 1008),  # awareness state not JSON
    ],
)
async def test_malformed_messages_close_the_connection_and_the_server_stays_up(
    server: RunningServer, client: httpx.AsyncClient, message: bytes, code: int
) -> None:
    token = _token(await issue(client))
    a = await _peer(server, token)
    await a.ws.send(message)
    await asyncio.wait_for(a._reader, WAIT_S)
    assert a.ws.close_code == code
    b = await _peer(server, token)
    b.text.insert(0, "still here")
    await _eventually(lambda: server.app.engine.get("app", "yd:notes") is not None)
    await b.close()


async def test_a_text_message_is_a_protocol_error(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    a = await _peer(server, _token(await issue(client)))
    await a.ws.send("hello")
    await asyncio.wait_for(a._reader, WAIT_S)
    assert a.ws.close_code == 1002


# After the upgrade no HTTP parser reads a byte: one parser is enough here.
@pytest.mark.parametrize("http_parser", ["httptools"])
@pytest.mark.parametrize("seed", range(3))
async def test_random_and_truncated_messages_never_take_the_server_down(
    server: RunningServer, client: httpx.AsyncClient, seed: int
) -> None:
    """Random bytes, truncated real messages and random updates in real
    frames: each connection either goes on or is closed with a code, and the
    document stays readable and writable."""
    import random

    rng = random.Random(seed)
    token = _token(await issue(client))
    good = Peer(
        await websockets.connect(
            f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/fuzz?token={token}"
        )
    )
    await good.start()
    good.text.insert(0, "base")
    real = [create_update_message(u) for u in (_edit_updates())] + [_awareness(9, 1, "{}")]
    for _ in range(30):
        ws = await websockets.connect(
            f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/fuzz?token={token}"
        )
        kind = rng.randrange(3)
        if kind == 0:
            message = rng.randbytes(rng.randint(0, 40))
        elif kind == 1:
            source = rng.choice(real)
            message = source[: rng.randint(0, len(source))]
        else:
            message = b"\x00\x02" + bytes([rng.randint(0, 60)]) + rng.randbytes(rng.randint(0, 60))
        await ws.send(message)
        await ws.send(b"\x03")  # then something valid
        try:  # read until the server closes it or goes quiet
            while True:
                await asyncio.wait_for(ws.recv(), 0.3)
        except (TimeoutError, websockets.ConnectionClosed):
            pass
        if ws.close_code is not None:
            assert ws.close_code in (1002, 1007, 1008, 1009), ws.close_code
        await ws.close()
    good.text.insert(len(str(good.text)), "!")

    def typed(value: str) -> bool:
        # "base!" in order: a random update may be a valid one that inserts
        # text of its own anywhere (seen: "fbas!e"), so not necessarily adjacent.
        rest = iter(value)
        return all(ch in rest for ch in "base!")

    h = {"authorization": f"Bearer {token}"}
    for _ in range(100):
        r = await client.get(f"{CRDTS}/yd:fuzz?root=content", headers=h)
        if r.status_code == 200 and typed(r.json()["value"]):
            break
        await asyncio.sleep(0.05)
    assert typed(r.json()["value"]), r.json()
    await good.close()


def _edit_updates() -> list[bytes]:
    doc: Doc[Any] = Doc()
    updates: list[bytes] = []
    doc.observe(lambda event: updates.append(event.update))
    text = doc.get("content", type=Text)
    for ch in "fuzzing":
        text += ch
    return updates


async def test_a_reconnecting_peer_gets_only_what_it_lacks(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    token = _token(await issue(client))
    a = await _peer(server, token)
    a.text.insert(0, "x" * 5000)
    await asyncio.sleep(0.2)
    copy: Doc[Any] = Doc()
    copy.apply_update(a.doc.get_update())
    a.text.insert(0, "new")
    await asyncio.sleep(0.2)
    # The server's answer to our step 1 (we have all but "new"): a few bytes,
    # not the 5000-character document.
    ws = await websockets.connect(
        f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/notes?token={token}"
    )
    await ws.send(create_sync_message(copy))
    step2 = None
    while step2 is None:
        message = await asyncio.wait_for(ws.recv(), WAIT_S)
        assert isinstance(message, bytes)
        if message[:2] == b"\x00\x01":
            step2 = message
    assert len(step2) < 100
    handle_sync_message(step2[1:], copy)
    assert str(copy.get("content", type=Text)).startswith("new")
    await ws.close()
    await a.close()


async def test_a_peer_joining_an_evicted_document_gets_all_of_it(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    token = _token(await issue(client))
    a = await _peer(server, token, room="cold")
    a.text.insert(0, "written before the eviction")
    engine = server.app.engine
    await _eventually(lambda: engine.get("app", "yd:cold") is not None)
    await a.close()
    residency = server.app.residency
    residency.budget_bytes = 1

    def evicted() -> bool:
        residency.check()  # passes are started by ops and loads; none come here
        return engine.get("app", "yd:cold") is None

    await _eventually(evicted)
    residency.budget_bytes = 1 << 30
    b = await _peer(server, token, room="cold")
    assert str(b.text) == "written before the eviction"
    assert residency.stats.loads >= 1
    await b.close()
