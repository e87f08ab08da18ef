"""Subscribes whose start waits for the store cannot make one connection
hold the snapshots of many large CRDTs at once.

A subscribe that resumes (``since`` and ``epoch``) or whose CRDT is not in
memory starts in a task; a read of such subscribes spawned one each before
any snapshot was fed, and each then fed its whole state, held for this peer
alone (tests/ws/test_ws_feed_pins.py stops the handling of further messages,
not these): a peer that read nothing held one state per subscribe. Now a
start that finds a state still going out (or the transport over its mark)
takes its snapshot later, as a lagging subscription does: once the feed is
out or the connection drains, then ``synced``."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from typing import Any

import msgpack
import pytest

from tests.ws.support import open_ws, stalled_peer, subscribe_frames, wait_for
from tests.ws.test_ws_resync_pins import (
    BOUND,
    DOCS,
    MAX_BODY,
    _read_messages,
    _seed,
)


# After the upgrade no HTTP parser reads a byte: one parser is enough here.
@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_starts_from_the_store_feed_one_large_snapshot_at_a_time(make_server: Any) -> None:
    server = await make_server(max_body_bytes=MAX_BODY, subscriber_buffer_bytes=BOUND)
    async with open_ws(server, max_size=None) as writer:
        await _seed(writer)
    size = len(msgpack.packb(server.app.engine.snapshot_delta("demo", DOCS[0])))
    raw, connection = await stalled_peer(server)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        # Resuming from a life that is gone: each start is a snapshot, in a task.
        raw.send(subscribe_frames(DOCS, since=1, epoch="gone"))
        await wait_for(lambda: len(connection.subscriptions) == len(DOCS))
        await wait_for(lambda: connection.session.inflight == 0)  # every start has run
        await asyncio.sleep(0.3)
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert grown < 3 * size, (grown, size)
    # Nothing is lost: each start is a snapshot, then its synced.
    messages = await _read_messages(raw, 2 * len(DOCS))
    for doc in DOCS:
        mine = [m["kind"] for m in messages if m["id"] == doc]
        assert mine == ["snapshot", "synced"], (doc, mine)
    raw.close()
