"""A peer that fell behind on many large CRDTs cannot make its connection
hold a fresh snapshot of each at once.

When a lagging connection drains, each subscription that skipped deltas gets
a fresh snapshot (docs/protocol.md#the-websocket). A large one goes out
through the connection's feed, held for this peer alone (a writer changed the
CRDT since anyone else was sent it), and was not counted against the bound:
one drain fed every lagging subscription's snapshot at once, so a peer that
read a little and stopped again held one whole state per subscription. Now
the resyncs go on only while the transport takes them: those left wait for
the feed to be out (or the next drain), as lagging subscriptions wait for
the drain itself."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from typing import Any

import msgpack
import pytest
from websockets.asyncio.client import ClientConnection

from syncd.ws.connection import WsConnection
from tests.conftest import RunningServer
from tests.ws.support import (
    WAIT_S,
    RawWs,
    op,
    open_ws,
    stalled_peer,
    subscribe_frames,
)

DOCS = [f"rg:lag{i}" for i in range(4)]
CHARS = 250_000
"""Each document's text: a snapshot of a few hundred KB, past the feed's slice."""
MAX_BODY = 4 * 1024 * 1024
BOUND = 65536


def _text(chars: int) -> str:
    return ("abcdefgh " * (chars // 9 + 1))[:chars]


async def _read_messages(raw: RawWs, count: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while len(out) < count:
        _, payload = await asyncio.wait_for(raw.frame(), WAIT_S)
        out.append(msgpack.unpackb(payload))
    return out


async def _seed(writer: ClientConnection) -> None:
    """Each of ``DOCS`` a large text."""
    for ref, doc in enumerate(DOCS):
        body = {"op": "insert", "index": 0, "text": _text(CHARS)}
        assert (await op(writer, doc, body, ref=ref))["kind"] == "ack"


async def _lag_every_subscription(writer: ClientConnection, connection: WsConnection) -> int:
    """Ops on every document until each of the (stalled) connection's
    subscriptions lags; the last ref used."""
    ref = 100
    while not all(s.lag for s in connection.subscriptions.values()):
        for doc in DOCS:
            ref += 1
            body = {"op": "insert", "index": 0, "text": _text(8000)}
            assert (await op(writer, doc, body, ref=ref))["kind"] == "ack"
        assert ref < 1000, "the subscriptions never fell behind"
    return ref


async def _read_until_drained(raw: RawWs, connection: WsConnection) -> None:
    """The peer reads a little: until the connection drains (a subscription
    stops lagging)."""
    subscriptions = list(connection.subscriptions.values())
    while all(s.lag for s in subscriptions):
        raw.buffer += await asyncio.wait_for(raw.reader.read(65536), WAIT_S)


async def _read_until_latest(raw: RawWs, server: RunningServer) -> None:
    """Reads on until each document's latest version has come (nothing is lost)."""
    latest: dict[str, int] = {}
    want = {doc: server.app.engine.snapshot_delta("demo", doc)["seq"] for doc in DOCS}
    while latest != want:
        message = (await _read_messages(raw, 1))[0]
        if message["kind"] in ("snapshot", "op"):
            latest[message["id"]] = message["seq"]


# After the upgrade no HTTP parser reads a byte: one parser is enough here.
@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_a_drain_does_not_feed_every_lagging_snapshot_at_once(make_server: Any) -> None:
    server = await make_server(max_body_bytes=MAX_BODY, subscriber_buffer_bytes=BOUND)
    async with open_ws(server, max_size=None) as writer:
        await _seed(writer)
        raw, connection = await stalled_peer(server)
        raw.send(subscribe_frames(DOCS))
        started = await _read_messages(raw, 2 * len(DOCS))
        assert [m["kind"] for m in started] == ["snapshot", "synced"] * len(DOCS)
        # The peer stops reading; ops on every document make each subscription lag.
        await _lag_every_subscription(writer, connection)
        size = len(msgpack.packb(server.app.engine.snapshot_delta("demo", DOCS[0])))
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            # It reads a little (the connection drains), then stops again.
            await _read_until_drained(raw, connection)
            await asyncio.sleep(0.3)
            grown = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
        assert grown < 3 * size, (grown, size)
        # Nothing is lost: reading on, each document's fresh snapshot comes.
        await _read_until_latest(raw, server)
        raw.close()
