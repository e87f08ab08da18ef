"""A peer that reads nothing cannot make one connection hold the snapshots of
many large CRDTs at once.

A large snapshot goes out through the connection's feed (a shared encoding,
written in slices as the socket drains, see syncd/ws/base_connection.py),
and the feed's shared bytes are not the connection's own, so they did not
count against the subscriber bound. While one was waiting for a stalled
peer, the session went on handling its messages: a read of subscribes to N
large CRDTs queued N whole encodings behind it, each pinned by this
connection alone, so a client that never reads held N times a CRDT's size of
the server's memory (and N versions of one CRDT, with a writer changing it
between its subscribes). Now a second state queued behind one still going
out stops the handling of messages until the feed is out, as a transport
over its bound does: at most two states wait for one peer."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from typing import Any

import msgpack
import pytest

from tests.conftest import RunningServer
from tests.ws.support import (
    WAIT_S,
    op,
    open_ws,
    stalled_peer,
    subscribe_frames,
    wait_for,
)

DOCS = [f"rg:pin{i}" for i in range(4)]
CHARS = 250_000
"""Each document's text: a snapshot of a few hundred KB, past the feed's slice."""
MAX_BODY = 4 * 1024 * 1024


async def _seed(server: RunningServer) -> None:
    async with open_ws(server, max_size=None) as writer:
        for ref, doc in enumerate(DOCS):
            text = ("abcdefgh " * (CHARS // 9 + 1))[:CHARS]
            ack = await op(writer, doc, {"op": "insert", "index": 0, "text": text}, ref=ref)
            assert ack["kind"] == "ack", ack


# After the upgrade no HTTP parser reads a byte: one parser is enough here.
@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_a_stalled_peer_pins_at_most_two_large_snapshots(make_server: Any) -> None:
    server = await make_server(max_body_bytes=MAX_BODY, subscriber_buffer_bytes=65536)
    await _seed(server)
    size = len(msgpack.packb(server.app.engine.snapshot_delta("demo", DOCS[0])))
    raw, connection = await stalled_peer(server)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        raw.send(subscribe_frames(DOCS))
        await wait_for(lambda: len(connection.subscriptions) >= 2)
        await asyncio.sleep(0.3)  # what else it would handle, it has handled by now
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert grown < 3 * size, (grown, size, len(connection.subscriptions))
    # Nothing is lost: as the peer reads, the rest of its subscribes are handled.
    seen: list[tuple[str, str]] = []
    while len(seen) < 2 * len(DOCS):
        opcode, payload = await asyncio.wait_for(raw.frame(), WAIT_S)
        message = msgpack.unpackb(payload)
        seen.append((message["kind"], message["id"]))
    assert seen == [(kind, doc) for doc in DOCS for kind in ("snapshot", "synced")]
    raw.close()


@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_a_peer_that_reads_nothing_is_still_closed_by_the_keepalive(
    make_server: Any,
) -> None:
    """Handling no message while states wait is not our silence: a peer
    that takes none of them answers no ping, and is closed as before."""
    server = await make_server(
        max_body_bytes=MAX_BODY, subscriber_buffer_bytes=65536, ws_ping_s=0.3
    )
    await _seed(server)
    raw, connection = await stalled_peer(server)
    raw.send(subscribe_frames(DOCS))
    await wait_for(lambda: len(connection.subscriptions) >= 2)
    await wait_for(lambda: connection.session.closing)  # 1011, its close frame behind the states
    raw.close()
