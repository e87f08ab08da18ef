"""A peer's close (or end of stream) is seen while the server holds its
messages back because it reads nothing of ours (two large snapshots queued
for it, see tests/ws/test_ws_feed_pins.py), on a real server and real sockets.

Before, the server stopped reading the socket then, so a peer that closed
was not seen closing until it had read both snapshots: its subscriptions and
the snapshots stayed until the keepalive closed it. Now the socket is read on
while the messages are held, up to a bound (``HELD_READ_BYTES``), and a close
frame in what was read is honoured at once: the messages before it are
handled (its ops applied; nothing more goes out but the answer to its close)
and the subscriptions end; the transport is dropped once the close timeout
passes without the peer taking what was still being written."""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any

import httpx
import msgpack
import pytest

from syncd.ws.base_connection import CLOSE_TIMEOUT_S, HELD_READ_BYTES
from tests.conftest import ADMIN, RunningServer
from tests.ws.support import (
    NS,
    WAIT_S,
    client_frame,
    op,
    open_ws,
    stalled_peer,
    subscribe_frames,
    wait_for,
)

DOCS = [f"rg:held{i}" for i in range(4)]
CHARS = 250_000
"""Each document's text: a snapshot of a few hundred KB, past the feed's slice."""
MAX_BODY = 4 * 1024 * 1024
PROMPT_S = 1.0
"""Well inside CLOSE_TIMEOUT_S: what a close frees is freed about at once."""


async def _seed(server: RunningServer) -> None:
    async with open_ws(server, max_size=None) as writer:
        for ref, doc in enumerate(DOCS):
            text = ("abcdefgh " * (CHARS // 9 + 1))[:CHARS]
            ack = await op(writer, doc, {"op": "insert", "index": 0, "text": text}, ref=ref)
            assert ack["kind"] == "ack", ack


async def _held(make_server: Any) -> tuple[RunningServer, Any, Any]:
    """A server, and a stalled peer whose messages it holds back: subscribed
    to every document, two snapshots queued for it, the rest unhandled."""
    server = await make_server(max_body_bytes=MAX_BODY, subscriber_buffer_bytes=65536)
    await _seed(server)
    raw, connection = await stalled_peer(server)
    raw.send(subscribe_frames(DOCS))
    await wait_for(lambda: len(connection.subscriptions) >= 2)
    await asyncio.sleep(0.2)
    assert connection._feed_holds_reading and len(connection.subscriptions) == 2
    return server, raw, connection


async def _value(server: RunningServer, crdt_id: str) -> Any:
    async with httpx.AsyncClient(base_url=server.url) as http:
        r = await http.get(
            f"/v1/namespaces/{NS}/crdts/{crdt_id}", headers={"authorization": f"Bearer {ADMIN}"}
        )
    return r.json().get("value")


# After the upgrade no HTTP parser reads a byte: one parser is enough here.
@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_a_close_is_honoured_while_messages_are_held(make_server: Any) -> None:
    server, raw, connection = await _held(make_server)
    # An op sent before the close, then the close; the peer still reads nothing.
    raw.send_message({"kind": "op", "id": "gc:before", "op": {"op": "increment"}, "ref": 1})
    raw.send(client_frame(0x8, struct.pack("!H", 1000)))
    started = time.monotonic()
    await wait_for(lambda: not connection.subscriptions, PROMPT_S)
    assert connection.session.closing and not connection.can_send
    assert not any(server.app.hub.subscribed(NS, doc) for doc in DOCS)
    # What it sent before its close is handled: the op is applied.
    await wait_for(lambda: server.app.engine.lookup((NS, "gc:before")) is not None, PROMPT_S)
    assert await _value(server, "gc:before") == 1
    # The snapshot still being written is given the close timeout, then the
    # transport is dropped: the connection is gone, not waiting for the keepalive.
    await wait_for(lambda: connection._gone, CLOSE_TIMEOUT_S + WAIT_S)
    assert time.monotonic() - started < CLOSE_TIMEOUT_S + 2
    raw.close()


@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_an_end_of_stream_is_seen_while_messages_are_held(make_server: Any) -> None:
    _, raw, connection = await _held(make_server)
    raw.writer.write_eof()  # half-closed, no close frame; still reading nothing
    await wait_for(lambda: not connection.subscriptions, PROMPT_S)
    await wait_for(lambda: connection._gone, CLOSE_TIMEOUT_S + WAIT_S)
    raw.close()


@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_what_is_read_while_held_is_bounded_and_then_handled(make_server: Any) -> None:
    _, raw, connection = await _held(make_server)
    pings = 40_000
    burst = b"".join(
        client_frame(0x2, msgpack.packb({"kind": "ping", "ref": i})) for i in range(pings)
    )
    assert len(burst) > 4 * HELD_READ_BYTES
    raw.send(burst)
    frames = connection.session._frames
    await wait_for(lambda: connection._read_paused)
    await asyncio.sleep(0.3)  # anything it would read past the bound, it has read by now
    # At most one read of the transport past the bound (asyncio reads 256 KiB at most).
    assert len(frames._buf) - frames._pos <= HELD_READ_BYTES + 256 * 1024
    # Nothing is lost: as the peer reads, every message is handled in order.
    pongs = 0
    snapshots = 0
    while pongs < pings:
        opcode, payload = await asyncio.wait_for(raw.frame(), WAIT_S)
        message = msgpack.unpackb(payload)
        if message["kind"] == "pong":
            assert message["ref"] == pongs
            pongs += 1
        elif message["kind"] == "snapshot":
            snapshots += 1
    assert snapshots == len(DOCS)
    raw.close()


@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_a_half_closed_peer_that_reads_nothing_is_dropped(make_server: Any) -> None:
    """Not held (what waits for it is under the bound), its end of stream is
    seen at once; the transport then waited for it to read what it held, and
    with the keepalive done (closing), nothing ever dropped it."""
    server = await make_server()
    async with open_ws(server) as writer:
        ack = await op(writer, "lw:mid", {"op": "set", "value": "x" * 40_000})
        assert ack["kind"] == "ack", ack
    raw, connection = await stalled_peer(server)
    raw.send_message({"kind": "subscribe", "id": "lw:mid"})
    await wait_for(lambda: connection.transport.get_write_buffer_size() > 10_000)
    assert not connection._write_paused
    raw.writer.write_eof()
    await wait_for(lambda: connection._gone, CLOSE_TIMEOUT_S + WAIT_S)
    raw.close()
