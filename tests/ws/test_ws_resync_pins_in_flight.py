"""Lagging subscriptions whose CRDTs have ops in flight at the drain get
their fresh snapshots one at a time too.

A drain resyncs lagging subscriptions only while the transport takes them
(tests/ws/test_ws_resync_pins.py). One whose CRDT has an op in flight waits
for it to be durable first (a task, ``WsConnection._resync``), and those
tasks did not look at the feed: a drain spawned one for each, and once the
commit went through every one of them fed its whole state at once."""

from __future__ import annotations

import asyncio
import gc
import threading
import tracemalloc
from pathlib import Path

import msgpack

from tests.store.support import gated_server
from tests.ws.support import open_ws, stalled_peer, subscribe_frames, wait_for
from tests.ws.test_ws_resync_pins import (
    BOUND,
    DOCS,
    MAX_BODY,
    _lag_every_subscription,
    _read_messages,
    _read_until_drained,
    _read_until_latest,
    _seed,
)


async def test_resyncs_waiting_for_a_commit_are_fed_one_at_a_time(tmp_path: Path) -> None:
    async with (
        gated_server(tmp_path / "data", max_body_bytes=MAX_BODY, subscriber_buffer_bytes=BOUND) as (
            server,
            faults,
        ),
        open_ws(server, max_size=None) as writer,
    ):
        await _seed(writer)
        raw, connection = await stalled_peer(server)
        raw.send(subscribe_frames(DOCS))
        await _read_messages(raw, 2 * len(DOCS))
        ref = await _lag_every_subscription(writer, connection)
        # An op on each document, held in flight by the store.
        faults.gate = threading.Event()
        for doc in DOCS:
            ref += 1
            await writer.send(
                msgpack.packb(
                    {
                        "kind": "op",
                        "id": doc,
                        "op": {"op": "insert", "index": 0, "text": "x"},
                        "ref": ref,
                    }
                )
            )
        service = server.app.service
        await wait_for(lambda: not any(service.durable_now("demo", d) for d in DOCS))
        size = len(msgpack.packb(server.app.engine.snapshot_delta("demo", DOCS[0])))
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            # It reads a little (the connection drains), then stops again.
            await _read_until_drained(raw, connection)
            faults.gate.set()  # the commit goes through
            await wait_for(lambda: all(service.durable_now("demo", d) for d in DOCS))
            await asyncio.sleep(0.3)
            grown = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
        assert grown < 3 * size, (grown, size)
        await _read_until_latest(raw, server)
        raw.close()
