"""A room remembers the clock of each awareness client that has no state (a
removed one, or one only ever named with a null state), so that a stale
echo of its state does not bring it back. Those are bounded: a connection
naming ever new clients with null states, or announcing and removing them
in turn (each within its 64 clients), grew the room's memory without end,
relayed to nobody and counted nowhere."""

from __future__ import annotations

import asyncio

import websockets
from pycrdt import Encoder

from syncd.yjs.protocol import awareness_message
from syncd.yjs.room import MAX_AWARENESS_CLIENTS, MAX_REMOVED_AWARENESS_CLIENTS
from tests.conftest import RunningServer
from tests.ws.support import NS, mint

WAIT_S = 5.0
ROOM = "removed"
NULLS_PER_MESSAGE = 1000
"""Within MAX_AWARENESS_UPDATE_CLIENTS: a larger update is ignored unread."""


def states(clients: list[tuple[int, int, str]]) -> bytes:
    encoder = Encoder()
    encoder.write_var_uint(len(clients))
    for client_id, clock, state in clients:
        encoder.write_var_uint(client_id)
        encoder.write_var_uint(clock)
        encoder.write_var_string(state)
    return awareness_message(encoder.to_bytes())


async def settled(ws: websockets.ClientConnection) -> None:
    """Everything sent before is handled: a query-awareness is answered in order."""
    await ws.send(b"\x03")
    while True:
        message = await asyncio.wait_for(ws.recv(), WAIT_S)
        if isinstance(message, bytes) and message[:1] == b"\x01":
            return


async def test_clients_without_a_state_are_remembered_within_a_bound(
    server: RunningServer,
) -> None:
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/{ROOM}?token={mint()}"
    # The room echoes each update to its sender, unread here: an unbounded
    # queue keeps the client reading, so its close is answered at once
    # (with the default 16 it stopped reading and waited out its 10 s).
    async with websockets.connect(url, ping_interval=None, max_queue=None) as ws:
        await ws.send(states([(1, 1, '{"n":1}')]))  # one live client, kept
        next_id = 10
        for _ in range(2 * MAX_REMOVED_AWARENESS_CLIENTS // NULLS_PER_MESSAGE + 1):
            ids = range(next_id, next_id + NULLS_PER_MESSAGE)
            next_id += NULLS_PER_MESSAGE
            await ws.send(states([(c, 1, "null") for c in ids]))
        for _ in range(2 * MAX_REMOVED_AWARENESS_CLIENTS // MAX_AWARENESS_CLIENTS + 1):
            ids = range(next_id, next_id + MAX_AWARENESS_CLIENTS - 1)
            next_id += MAX_AWARENESS_CLIENTS
            await ws.send(states([(c, 1, "{}") for c in ids]))
            await ws.send(states([(c, 2, "null") for c in ids]))
        await settled(ws)
        room = server.app.rooms._rooms[(NS, "yd:" + ROOM)]
        meta, held = room.awareness.meta, room.awareness.states
        assert 1 in held
        assert len(meta) - len(held) <= MAX_REMOVED_AWARENESS_CLIENTS
