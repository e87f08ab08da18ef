"""A WebSocket subscription's resync survives a cancelled ``anext``.

A gap in one id's seqs makes the subscription ask for that id again on the
same socket. It sent ``unsubscribe`` and then ``subscribe``: when the socket
was slow to take them (its write buffer full), a reader cancelled there (a
timeout on its ``anext``) left the unsubscribe sent and the subscribe never
sent, and that id got no delta again until a reconnect. The real server
behind a TCP proxy that stops reading the client's bytes for a while, so the
client's write buffer fills at the resync."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

from syncd.client import AsyncClient, Subscription
from tests.client.conftest import NS, make_token
from tests.client.stalling_proxy import proxy_to
from tests.conftest import RunningServer

WAIT_S = 10.0
CLIENT_SEND_BUFFER_BYTES = 4096
"""The client socket's kernel send buffer: small, so that what the proxy does
not read backs up into the client's own write buffer at once."""
PING_PAYLOAD_BYTES = 120
"""Under the 125 bytes a WebSocket ping may carry."""


async def _fill_write_buffer(sub: Subscription) -> asyncio.Task[None]:
    """Send pings until the client's write buffer is full (the proxy is
    stalled); the task left waits in the last ping for room."""
    ws = sub._ws
    assert ws is not None
    sock = ws.transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CLIENT_SEND_BUFFER_BYTES)

    full = asyncio.Event()

    async def ping_until_paused() -> None:
        count = 0
        while not full.is_set():  # the last ping returns once there is room again
            count += 1
            await ws.ping(count.to_bytes(8, "big") * (PING_PAYLOAD_BYTES // 8))
            await asyncio.sleep(0)

    filling = asyncio.create_task(ping_until_paused())
    async with asyncio.timeout(WAIT_S):
        while not ws.paused:
            await asyncio.sleep(0)
    full.set()
    return filling


async def _seqs(sub: Subscription, wanted: dict[str, int]) -> dict[str, list[int]]:
    """The seqs of the next ``wanted[id]`` deltas of each id."""
    got: dict[str, list[int]] = {crdt_id: [] for crdt_id in wanted}
    async with asyncio.timeout(WAIT_S):
        while any(len(got[crdt_id]) < n for crdt_id, n in wanted.items()):
            delta: dict[str, Any] = await anext(sub)
            got[delta["id"]].append(delta["seq"])
    return got


async def test_a_resync_cancelled_on_a_full_socket_still_resubscribes(
    server: RunningServer,
) -> None:
    async with AsyncClient(server.url, make_token(2), NS) as writer, proxy_to(server) as proxy:
        await writer.apply("gc:gap", [{"op": "increment"}] * 2)
        await writer.gcounter_increment("gc:other")
        reader = AsyncClient(f"http://127.0.0.1:{proxy.port}", make_token(3), NS)
        async with reader, reader.subscribe(["gc:gap", "gc:other"]) as sub:
            assert await _seqs(sub, {"gc:gap": 1, "gc:other": 1}) == {  # the snapshots
                "gc:gap": [2],
                "gc:other": [1],
            }
            # The client's bytes stop reaching the server; its write buffer fills.
            proxy.stall()
            filling = await _fill_write_buffer(sub)
            # Lose seq 2 as far as the client knows: seq 3 is a gap, so a resync.
            sub._tracker.position("gc:gap").seq = 1
            await writer.gcounter_increment("gc:gap")
            read = asyncio.create_task(anext(sub))
            async with asyncio.timeout(WAIT_S):
                while sub.resyncs == 0:
                    await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            assert not read.done()  # waiting for room to send the resync
            read.cancel()  # e.g. the reader's own timeout
            with contextlib.suppress(asyncio.CancelledError):
                await read
            proxy.resume()
            await filling
            # Both ids go on: the resynced one from seq 1 (the replay), the other live.
            await writer.gcounter_increment("gc:gap")
            await writer.gcounter_increment("gc:other")
            got = await _seqs(sub, {"gc:gap": 3, "gc:other": 1})
            assert got == {"gc:gap": [2, 3, 4], "gc:other": [2]}
            assert sub.connects == 1
