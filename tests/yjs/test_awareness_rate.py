"""A Yjs peer's awareness updates count against the token's rate limit
(syncd/yjs/channel.py, ``_charge_awareness``).

Each awareness update that changes the room is sent to every connection of
the room (and to the other nodes), and none was counted: one token could
make the server fan out as many as it could send. Now each one that the room
relays counts as a request, but the first (the join's, which the upgrade or
the document's auth paid for); over the limit the socket is not read until
the limit allows, as for an update (y-websocket cannot be told to slow
down, Hocuspocus has no refusal for awareness). An update that changes
nothing (providers echo back every state they are sent) is not relayed and
not counted: in a busy room every provider echoes every cursor move. Both
protocols, on a real socket, watched from another connection of the room.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from functools import partial
from typing import Any

import pytest
import websockets
from pycrdt import Encoder

from syncd.yjs.protocol import MESSAGE_AWARENESS, Reader, awareness_message
from tests.conftest import ADMIN, RunningServer
from tests.ws.support import NS
from tests.yjs.support import ROOM, WAIT_S, hocuspocus_peer, limited, y_websocket

CLIENT_ID = 4242

AT_ONCE_MAX_S = 0.5
"""Updates within the limit are relayed well before a wait for it (1 s) would end."""

PACED_MIN_S = 1.8
"""Updates beyond twice the limit span two windows: about 2 s, not at once."""

ECHOES = 30


def _state(clock: int) -> bytes:
    """An awareness message giving :data:`CLIENT_ID` a state at ``clock``."""
    update = Encoder()
    update.write_var_uint(1)
    update.write_var_uint(CLIENT_ID)
    update.write_var_uint(clock)
    update.write_var_string(f'{{"cursor":{clock}}}')
    return awareness_message(update.to_bytes())


def _clock(message: bytes) -> int | None:
    """The clock :data:`CLIENT_ID` has in an awareness message, else None."""
    reader = Reader(message)
    if reader.var_uint() != MESSAGE_AWARENESS:
        return None
    update = Reader(reader.byte_string())
    for _ in range(update.var_uint()):
        client, clock = update.var_uint(), update.var_uint()
        update.byte_string()
        if client == CLIENT_ID:
            return clock
    return None


class Watcher:
    """Another y-websocket connection of the room (the admin's: not limited),
    noting when each clock of :data:`CLIENT_ID` reaches it."""

    def __init__(self, ws: Any) -> None:
        self.arrived: dict[int, float] = {}
        self._ws = ws

    async def read(self) -> None:
        async for message in self._ws:
            clock = _clock(message)
            if clock is not None:
                self.arrived.setdefault(clock, time.monotonic())

    async def until(self, clock: int) -> float:
        deadline = time.monotonic() + WAIT_S
        while clock not in self.arrived:
            assert time.monotonic() < deadline, f"clock {clock} never relayed"
            await asyncio.sleep(0.01)
        return self.arrived[clock]


PEERS = [
    pytest.param(partial(y_websocket, wanted=lambda m: m), id="y-websocket"),
    pytest.param(partial(hocuspocus_peer, wanted=lambda m: m), id="hocuspocus"),
]


def _drain(receive: Any) -> asyncio.Task[None]:
    """Read what the peer is sent (its own updates come back to it): unread,
    its close would wait out the client's close timeout."""

    async def drain() -> None:
        with contextlib.suppress(Exception):
            while True:
                await receive()

    return asyncio.get_running_loop().create_task(drain())


async def _watch(server: RunningServer) -> tuple[Any, Watcher, asyncio.Task[None]]:
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/{ROOM}?token={ADMIN}"
    ws = await websockets.connect(url, ping_interval=None, max_queue=None)
    watcher = Watcher(ws)
    return ws, watcher, asyncio.get_running_loop().create_task(watcher.read())


@pytest.mark.parametrize("peer", PEERS)
async def test_awareness_updates_are_paced_by_the_limit(server: RunningServer, peer: Any) -> None:
    rate_limit = 3
    ws, watcher, reading = await _watch(server)
    try:
        async with peer(server, limited(rate_limit)) as (send, receive):
            draining = _drain(receive)
            # The first is the join's; with the upgrade or auth, the rest are
            # 3 * rate_limit units: three windows.
            count = 3 * rate_limit
            started = time.monotonic()
            for clock in range(1, count + 1):
                await send(_state(clock))
            assert await watcher.until(count) - started >= PACED_MIN_S
            assert sorted(watcher.arrived) == list(range(1, count + 1))  # none dropped
            draining.cancel()
    finally:
        reading.cancel()
        await ws.close()


@pytest.mark.parametrize("peer", PEERS)
async def test_echoes_are_not_counted(server: RunningServer, peer: Any) -> None:
    ws, watcher, reading = await _watch(server)
    try:
        async with peer(server, limited(2)) as (send, receive):
            draining = _drain(receive)
            started = time.monotonic()
            await send(_state(1))  # the join's: free
            for _ in range(ECHOES):  # the same clock: changes nothing
                await send(_state(1))
            await send(_state(2))  # the one unit the upgrade or auth left
            assert await watcher.until(2) - started < AT_ONCE_MAX_S
            draining.cancel()
    finally:
        reading.cancel()
        await ws.close()


@pytest.mark.parametrize("peer", PEERS)
async def test_the_admin_secret_is_not_limited(make_server: Any, peer: Any) -> None:
    server: RunningServer = await make_server(rate_limit=1)
    ws, watcher, reading = await _watch(server)
    try:
        async with peer(server, ADMIN) as (send, receive):
            draining = _drain(receive)
            started = time.monotonic()
            for clock in range(1, 31):
                await send(_state(clock))
            assert await watcher.until(30) - started < AT_ONCE_MAX_S
            draining.cancel()
    finally:
        reading.cancel()
        await ws.close()
