"""Native subscriptions to a large CRDT: one shared snapshot for the
subscriptions sent the same version, fed to each socket as it drains, deltas
behind it in order, and the bound, on a real server with real sockets."""

from __future__ import annotations

import asyncio
import gc
import json
import random
import tracemalloc
from typing import Any

import msgpack
import pytest

from syncd.ws.connection import WsConnection
from tests.conftest import RunningServer
from tests.ws.support import WAIT_S, RawWs, op, open_ws, stalled_peer, wait_for

DOC = "rg:big"
MAX_BODY = 8 * 1024 * 1024
CHUNK = 200_000
CHUNKS = 8
"""A text of 1.6 M characters, inserted at several places: a large state."""
SUBSCRIBERS = 8


async def _seed(server: RunningServer) -> None:
    rng = random.Random(35)
    async with open_ws(server, max_size=None) as writer:
        length = 0
        for i in range(CHUNKS):
            text = "".join(rng.choice("abcdefgh ") for _ in range(CHUNK))
            body = {"op": "insert", "index": rng.randint(0, length), "text": text}
            ack = await op(writer, DOC, body, ref=i)
            assert ack["kind"] == "ack", ack
            length += CHUNK


async def _subscriber(server: RunningServer, *, binary: bool = True) -> tuple[RawWs, WsConnection]:
    """A stalled peer (``stalled_peer``) and the server's connection for it,
    subscribed to the document."""
    raw, connection = await stalled_peer(server)
    message = {"kind": "subscribe", "id": DOC}
    if binary:
        raw.send_message(message)
    else:
        from tests.ws.support import client_frame

        raw.send(client_frame(0x1, json.dumps(message).encode()))
    await wait_for(lambda: DOC in connection.subscriptions)
    return raw, connection


async def _messages(raw: RawWs, count: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while len(out) < count:
        opcode, payload = await asyncio.wait_for(raw.frame(), WAIT_S)
        out.append(msgpack.unpackb(payload) if opcode == 0x2 else json.loads(payload))
    return out


def _on_hand(connection: WsConnection, size: int) -> bool:
    return connection._feed is not None or connection.transport.get_write_buffer_size() > size // 2


# After the upgrade no HTTP parser reads a byte: one parser is enough here.
@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_slow_subscribers_hold_one_snapshot_per_form(make_server: Any) -> None:
    server = await make_server(max_body_bytes=MAX_BODY)
    await _seed(server)
    expected = server.app.engine.snapshot_delta("demo", DOC)
    size = len(msgpack.packb(expected))
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        subscribers = [await _subscriber(server) for _ in range(SUBSCRIBERS)]
        await wait_for(lambda: all(_on_hand(c, size) for _, c in subscribers))
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert grown < 2 * size, grown  # one copy for all, not one each
    shared = subscribers[0][1]._app.shared
    assert len(shared) == 1
    text_raw, _ = await _subscriber(server, binary=False)
    assert len(shared) == 2  # JSON is another form
    for raw, _ in subscribers:
        (snapshot,) = await _messages(raw, 1)
        assert snapshot == expected
        raw.close()
    (snapshot,) = await _messages(text_raw, 1)
    assert snapshot == json.loads(json.dumps(expected))
    text_raw.close()
    await wait_for(lambda: gc.collect() >= 0 and len(shared) == 0)


async def test_deltas_during_the_snapshot_follow_it_in_seq_order(make_server: Any) -> None:
    server = await make_server(max_body_bytes=MAX_BODY)
    await _seed(server)
    raw, connection = await _subscriber(server)
    await wait_for(lambda: connection._feed is not None)
    subscription = connection.subscriptions[DOC]
    first = subscription.last_seq
    async with open_ws(server) as writer:
        for i in range(40):
            ack = await op(writer, DOC, {"op": "insert", "index": i, "text": f"<{i}>"}, ref=i)
            assert ack["seq"] == first + i + 1
    await wait_for(lambda: subscription.last_seq == first + 40)
    assert not subscription.lag and not connection.write_paused
    messages = await _messages(raw, 42)
    assert messages[0]["kind"] == "snapshot" and messages[0]["seq"] == first
    # The start ends with synced, behind the snapshot and before the deltas.
    assert (messages[1]["kind"], messages[1]["seq"]) == ("synced", first)
    assert [(m["kind"], m["seq"]) for m in messages[2:]] == [
        ("op", first + i + 1) for i in range(40)
    ]
    raw.close()


BOUND = 16 * 1024
VALUE = "v" * 3000


async def test_past_the_bound_the_subscription_lags_and_resyncs(make_server: Any) -> None:
    server = await make_server(max_body_bytes=MAX_BODY, subscriber_buffer_bytes=BOUND)
    await _seed(server)
    raw, connection = await _subscriber(server)
    await wait_for(lambda: connection._feed is not None)
    feed = connection._feed
    assert feed is not None
    subscription = connection.subscriptions[DOC]
    first = subscription.last_seq
    seq = first
    async with open_ws(server) as writer:
        while not connection.write_paused:
            # At or under the bound, every delta waits behind the snapshot.
            assert feed.own_bytes <= BOUND and not subscription.lag
            assert seq < first + 100, "the bound was never reached"
            seq += 1
            await op(writer, DOC, {"op": "insert", "index": 0, "text": VALUE}, ref=seq)
            await wait_for(lambda: subscription.last_seq == seq)  # noqa: B023
            await wait_for(lambda: not connection._out)  # the flusher wrote it: into the feed
        # The delta that went past the bound was queued; the next are skipped.
        assert feed.own_bytes > BOUND
        queued = seq - first
        for _ in range(3):
            seq += 1
            await op(writer, DOC, {"op": "insert", "index": 0, "text": VALUE}, ref=seq)
    await wait_for(lambda: subscription.lag)
    messages = await _messages(raw, 1 + 1 + queued + 1)
    assert (messages[0]["kind"], messages[0]["seq"]) == ("snapshot", first)
    assert (messages.pop(1)["kind"], messages[0]["seq"]) == ("synced", first)
    assert [m["seq"] for m in messages[1:-1]] == list(range(first + 1, first + queued + 1))
    resync = messages[-1]
    assert (resync["kind"], resync["seq"]) == ("snapshot", seq)
    assert resync == server.app.engine.snapshot_delta("demo", DOC)
    assert not subscription.lag and not connection.write_paused
    raw.close()
