"""The blocking ``Client.subscribe`` / ``events`` streams expose the async
streams' ``is_synced(id)``: false before the ``synced`` message that ends the
start (docs/protocol.md#resuming) has come, as the async stream's does: true
once a delta after it was read, false for an id the stream does not follow. Real server, the stream's own
background thread."""

from __future__ import annotations

import asyncio

import pytest

from syncd.client import Client
from syncd.client.sync import BlockingStream
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

WAIT_S = 10.0


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_blocking_stream_is_synced(server: RunningServer, via: str) -> None:
    crdt_id = f"gc:bs-{via}"

    def run() -> None:
        with Client(server.url, make_token(5), NS) as client:
            client.gcounter_increment(crdt_id, 2)
            opened: BlockingStream = (
                client.subscribe([crdt_id]) if via == "ws" else client.events(crdt_id)
            )
            with opened as stream:
                snapshot = stream.next(timeout=WAIT_S)
                assert (snapshot["kind"], snapshot["seq"]) == ("snapshot", 1)
                client.gcounter_increment(crdt_id, 1)
                delta = stream.next(timeout=WAIT_S)  # the synced message came between
                assert (delta["kind"], delta["seq"]) == ("op", 2)
                assert stream.is_synced(crdt_id)
                assert not stream.is_synced("gc:other")

    await asyncio.to_thread(run)
