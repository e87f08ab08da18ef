"""A resume whose replay outruns a reader that is not reading: its ``synced``
comes once the start is really all sent (docs/protocol.md "The end of the start").

A replay goes out under the subscriber bound like live deltas do. When the
socket fell behind in the middle of it, the rest of the replay was skipped for a
snapshot once the socket drained, but ``synced`` went out at once, at the last
seq the replay had reached: the client was told "caught up" at a position
older than the moment it subscribed, then got the snapshot afterwards.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack

from syncd.ws.connection import WsConnection
from tests.ws.support import WAIT_S, op, open_ws, recv, send_mp, stalled_client, wait_for

BOUND = 4096
VALUE = "v" * 60_000
OPS = 120
"""About 7 MB of replay: more than loopback socket buffers take unread."""


async def test_synced_after_a_replay_that_fell_behind_ends_the_start(make_server: Any) -> None:
    server = await make_server(subscriber_buffer_bytes=BOUND)
    async with open_ws(server) as writer:
        await op(writer, "lw:r", {"op": "set", "value": 0}, ref=0)
        await send_mp(writer, {"kind": "subscribe", "id": "lw:r"})
        epoch = (await recv(writer))["epoch"]
        for ref in range(1, OPS + 1):
            await send_mp(
                writer,
                {"kind": "op", "id": "lw:r", "op": {"op": "set", "value": VALUE}, "ref": ref},
            )
        acks = 0
        while acks < OPS:
            acks += (await recv(writer))["kind"] == "ack"
    last = OPS + 1

    before = set(server.app.server_ctx.other_connections)
    stalled = await stalled_client(server)
    (session,) = set(server.app.server_ctx.other_connections) - before
    assert isinstance(session, WsConnection)
    stalled.send_message({"kind": "subscribe", "id": "lw:r", "since": 1, "epoch": epoch})
    await wait_for(lambda: "lw:r" in session.subscriptions)
    subscription = session.subscriptions["lw:r"]
    await wait_for(lambda: subscription.pending is None)
    assert subscription.lag, "the replay never outran the reader"

    frames: list[dict[str, Any]] = []
    while not frames or frames[-1]["kind"] != "synced":
        opcode, payload = await asyncio.wait_for(stalled.frame(), WAIT_S)
        assert opcode == 0x2
        frames.append(msgpack.unpackb(payload))
    # One synced, at the head of the life, once everything the start owed is sent.
    assert frames[-1] == {"kind": "synced", "ns": "demo", "id": "lw:r", "seq": last, "epoch": epoch}
    assert frames[-2]["kind"] == "snapshot" and frames[-2]["seq"] == last
    replayed = [f["seq"] for f in frames[:-2]]
    assert replayed == list(range(2, 2 + len(replayed)))
    stalled.send_message({"kind": "ping", "ref": 1})
    opcode, payload = await asyncio.wait_for(stalled.frame(), WAIT_S)
    assert msgpack.unpackb(payload) == {"kind": "pong", "ref": 1}  # no second synced
    stalled.close()
