"""Fresh providers joining a large document: one shared copy of it, fed to
each socket as it drains, deltas behind it in order, and the limits at their
bounds, on a real server with real sockets."""

from __future__ import annotations

import asyncio
import base64
import gc
import random
import socket
import tracemalloc
from typing import Any

import httpx
import pytest
import websockets
from pycrdt import Doc, Text, handle_sync_message

from syncd.shared_states import SHARE_MIN_BYTES, SharedStates
from syncd.wire import WS_OPCODE_BINARY, ws_frame
from syncd.yjs import channel as channel_module
from syncd.yjs.channel import WHOLE_UPDATE
from syncd.yjs.connection import YjsConnection
from syncd.yjs.protocol import SYNC_STEP2, SYNC_UPDATE, sync_step1, sync_update
from tests.conftest import RunningServer
from tests.http.support import issue, op
from tests.ws.support import RawWs, client_frame, wait_for

DOC = "yd:big"
ROOM = "big"
MAX_BODY = 8 * 1024 * 1024
"""Room for the seed: the document is sent in one update."""
DOC_CHARS = 1_500_000
JOINERS = 10


def _document() -> tuple[Doc[Any], bytes]:
    """A document well over the share threshold, built by a few hundred edits,
    and the update that makes it."""
    rng = random.Random(35)
    doc: Doc[Any] = Doc(client_id=1)
    text = doc.get("content", type=Text)
    while len(text) < DOC_CHARS:
        with doc.transaction():
            text.insert(rng.randint(0, len(text)), "word " * rng.randint(500, 1500))
            if len(text) > 1000 and rng.random() < 0.3:
                at = rng.randint(0, len(text) - 100)
                del text[at : at + 50]
    return doc, doc.get_update()


def _edits(doc: Doc[Any], count: int, size: int = 20, first: int = 0) -> list[bytes]:
    """``count`` small updates made on ``doc``, in order, of about ``size``
    bytes of text each (numbered from ``first``)."""
    updates: list[bytes] = []
    sub = doc.observe(lambda event: updates.append(event.update))
    text = doc.get("content", type=Text)
    for i in range(first, first + count):
        text.insert(i * 7 % len(text), f"<{i:0{size - 2}d}>")
    doc.unobserve(sub)
    return updates


class Seeded:
    def __init__(self, server: RunningServer, client: httpx.AsyncClient, headers: dict[str, str]):
        self.server = server
        self.client = client
        self.headers = headers
        self.token = headers["authorization"].removeprefix("Bearer ")
        self.doc, update = _document()
        self.seed = update

    async def start(self) -> Seeded:
        await self.post(self.seed)
        return self

    async def post(self, update: bytes) -> None:
        body = {"op": "update", "update": base64.b64encode(update).decode()}
        r = await op(self.client, self.headers, DOC, body)
        assert r.status_code == 200, r.text

    def text(self) -> str:
        return str(self.doc.get("content", type=Text))


async def _seeded(make_server: Any, **settings: Any) -> tuple[Seeded, httpx.AsyncClient]:
    server = await make_server(max_body_bytes=MAX_BODY, **settings)
    client = httpx.AsyncClient(base_url=server.url, timeout=30)
    seeded = await Seeded(server, client, await issue(client)).start()
    return seeded, client


async def _joiner(seeded: Seeded, *, stalled: bool) -> tuple[RawWs, YjsConnection]:
    """A fresh provider's socket (a small receive window when ``stalled``, so
    the server cannot hand the kernel the whole document), and the server's
    connection for it; its step 1 (empty: it has nothing) is sent."""
    server = seeded.server
    before = set(server.app.server_ctx.other_connections)
    sock = socket.socket()
    if stalled:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=1024 if stalled else 2**16)
    raw = RawWs(reader, writer)
    status, _ = await raw.handshake("", path=f"/v1/namespaces/app/yjs/{ROOM}?token={seeded.token}")
    assert status == 101
    await wait_for(lambda: set(server.app.server_ctx.other_connections) - before)
    (connection,) = set(server.app.server_ctx.other_connections) - before
    assert isinstance(connection, YjsConnection)
    if stalled:
        # On loopback the server's send buffer grows to megabytes, and would
        # take the document off the server's hands; a peer far away does not.
        connection.transport.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_SNDBUF, 4096
        )
    raw.send(client_frame(WS_OPCODE_BINARY, sync_step1(b"\x00")))
    return raw, connection


async def _sync_messages(raw: RawWs, count: int) -> list[bytes]:
    """The next ``count`` sync messages of steps 2 and updates (the server's
    step 1 and awareness are passed over), as they came."""
    out: list[bytes] = []
    while len(out) < count:
        opcode, payload = await raw.frame()
        assert opcode == WS_OPCODE_BINARY
        if payload[0] == 0 and payload[1] in (SYNC_STEP2, SYNC_UPDATE):
            out.append(payload)
    return out


def _text_of(messages: list[bytes]) -> str:
    doc: Doc[Any] = Doc()
    for message in messages:
        handle_sync_message(message[1:], doc)
    return str(doc.get("content", type=Text))


def _shared(connection: YjsConnection) -> SharedStates:
    return connection.channel._ctx.shared


def _feeding(connection: YjsConnection) -> bool:
    return connection._feed is not None


def _on_hand(connection: YjsConnection, size: int) -> bool:
    """The server still has most of a ``size``-byte message for this peer:
    in a feed, or in the transport's buffer (as it was before feeds)."""
    return _feeding(connection) or connection.transport.get_write_buffer_size() > size // 2


# After the upgrade no HTTP parser reads a byte: one parser is enough here.
@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_slow_joiners_hold_one_copy_and_each_gets_the_exact_document(
    make_server: Any,
) -> None:
    seeded, client = await _seeded(make_server)
    try:
        whole = seeded.doc.get_update()
        assert len(whole) > 10 * SHARE_MIN_BYTES
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            joiners = [await _joiner(seeded, stalled=True) for _ in range(JOINERS)]
            # Every joiner is being sent the document and none has read it.
            await wait_for(lambda: all(_on_hand(c, len(whole)) for _, c in joiners))
            grown = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
        # One copy for all (sent one each, it was JOINERS copies).
        assert grown < 2 * len(whole), grown
        shared = _shared(joiners[0][1])
        assert len(shared) == 1
        steps: list[bytes] = []
        for raw, _ in joiners:
            (step2,) = await _sync_messages(raw, 1)
            assert step2[1] == SYNC_STEP2
            steps.append(step2)
        assert all(step == steps[0] for step in steps)
        assert _text_of(steps[:1]) == seeded.text()
        for raw, _ in joiners:
            raw.close()
        # Nobody is sent it any more: nothing is kept.
        await wait_for(lambda: gc.collect() >= 0 and len(shared) == 0)
    finally:
        await client.aclose()


async def test_deltas_that_come_during_the_feed_follow_it_in_order(make_server: Any) -> None:
    seeded, client = await _seeded(make_server)
    try:
        raw, connection = await _joiner(seeded, stalled=True)
        await wait_for(lambda: _feeding(connection))
        updates = _edits(seeded.doc, 30)
        frames = 0
        for update in updates:
            await seeded.post(update)
            frames += len(ws_frame(WS_OPCODE_BINARY, sync_update(update)))
        # All queued behind the document, none skipped.
        await wait_for(
            lambda: connection._feed is not None and connection._feed.own_bytes == frames
        )
        assert not connection.write_paused
        messages = await _sync_messages(raw, 1 + len(updates))
        assert messages[0][1] == SYNC_STEP2
        assert messages[1:] == [sync_update(u) for u in updates]
        assert _text_of(messages) == seeded.text()
        raw.close()
    finally:
        await client.aclose()


BOUND = 16 * 1024


def _frame_bytes(update: bytes) -> int:
    return len(ws_frame(WS_OPCODE_BINARY, sync_update(update)))


async def test_past_the_bound_the_joiner_lags_and_gets_the_whole_document_after(
    make_server: Any,
) -> None:
    seeded, client = await _seeded(make_server, subscriber_buffer_bytes=BOUND)
    try:
        raw, connection = await _joiner(seeded, stalled=True)
        await wait_for(lambda: _feeding(connection))
        channel = connection.channel
        feed = connection._feed
        assert feed is not None
        queued: list[bytes] = []
        while feed.own_bytes <= BOUND:
            # At or under the bound, every delta waits behind the document.
            assert not connection.write_paused and not channel._lagged
            assert len(queued) < 1000, "the bound was never reached"
            (update,) = _edits(seeded.doc, 1, size=200, first=len(queued))
            was = feed.own_bytes
            await seeded.post(update)
            await wait_for(lambda: feed.own_bytes == was + _frame_bytes(update))  # noqa: B023
            queued.append(update)
        # The delta that went past the bound was queued; the connection now
        # counts as paused, and the next ones are skipped.
        assert connection.write_paused
        held = feed.own_bytes
        for i in range(5):
            (update,) = _edits(seeded.doc, 1, size=200, first=len(queued) + i)
            await seeded.post(update)
        await wait_for(lambda: channel._lagged)
        assert feed.own_bytes == held
        # Reading: the document, what was queued in order, then the whole
        # document again (what the lag skipped is in it).
        messages = await _sync_messages(raw, 1 + len(queued))
        assert messages[0][1] == SYNC_STEP2
        assert messages[1:] == [sync_update(u) for u in queued]
        want = seeded.text()
        tail: list[bytes] = []

        async def caught_up() -> None:
            while _text_of(messages + tail) != want:
                tail.extend(await _sync_messages(raw, 1))

        await asyncio.wait_for(caught_up(), 10)
        assert tail and all(m[1] == SYNC_UPDATE for m in tail)
        assert not channel._lagged and not connection.write_paused
        assert connection._feed is None
        raw.close()
    finally:
        await client.aclose()


async def test_a_recent_shared_document_and_a_catch_up_within_the_lag(
    make_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(channel_module, "SHARED_MAX_LAG_OPS", 2)
    seeded, client = await _seeded(make_server)
    try:
        holder, held_by = await _joiner(seeded, stalled=True)  # keeps the first encoding alive
        await wait_for(lambda: _feeding(held_by))
        shared = _shared(held_by)
        entry = seeded.server.app.engine.get("app", DOC)
        assert entry is not None
        first = shared.recent(entry, WHOLE_UPDATE, 0)
        assert first is not None
        old = bytes(first[0])
        for update in _edits(seeded.doc, 2):
            await seeded.post(update)
        # Two behind, within the lag: the old document and a catch-up.
        raw, _ = await _joiner(seeded, stalled=False)
        step2, catch_up = await _sync_messages(raw, 2)
        assert step2.endswith(old) and catch_up[1] == SYNC_UPDATE
        assert _text_of([step2]) != seeded.text()
        assert _text_of([step2, catch_up]) == seeded.text()
        raw.close()
        # Three behind, past it: a fresh encoding, whole by itself.
        for update in _edits(seeded.doc, 1, first=2):
            await seeded.post(update)
        raw, _ = await _joiner(seeded, stalled=False)
        (step2,) = await _sync_messages(raw, 1)
        assert not step2.endswith(old)
        assert _text_of([step2]) == seeded.text()
        raw.close()
        holder.close()
    finally:
        await client.aclose()


async def test_a_hocuspocus_provider_is_sent_the_shared_document_under_its_name(
    make_server: Any,
) -> None:
    seeded, client = await _seeded(make_server)
    try:
        from pycrdt import Encoder

        def framed(name: str, body: bytes) -> bytes:
            encoder = Encoder()
            encoder.write_var_string(name)
            return encoder.to_bytes() + body

        auth = Encoder()
        auth.write_var_uint(2)
        auth.write_var_uint(0)
        auth.write_var_string(seeded.token)
        auth.write_var_string("3.4.4")
        url = f"ws://127.0.0.1:{seeded.server.port}/v1/namespaces/app/hocuspocus"
        async with websockets.connect(url, max_size=None) as ws:
            await ws.send(framed(ROOM, auth.to_bytes()))
            await ws.send(framed(ROOM, sync_step1(b"\x00")))
            prefix = framed(ROOM, b"")
            while True:
                message = await asyncio.wait_for(ws.recv(), 10)
                assert isinstance(message, bytes) and message.startswith(prefix)
                body = message[len(prefix) :]
                if body[:2] == bytes([0, SYNC_STEP2]):
                    break
            assert _text_of([body]) == seeded.text()
    finally:
        await client.aclose()
