"""A provider echoes the room's awareness states back: y-websocket (3.x) and
``@hocuspocus/provider`` send every awareness ``update`` event of theirs on
the socket, whatever its origin, so a newcomer sends the states it was just
given straight back. Those are other connections' clients, announced
already: they must not count against the newcomer's
MAX_AWARENESS_CLIENTS, or a room of more clients than that closes every
provider that joins it (1008, and again on each reconnect)."""

from __future__ import annotations

import asyncio
import contextlib

import websockets
from pycrdt import Decoder, Encoder

from syncd.yjs.protocol import awareness_message
from syncd.yjs.room import MAX_AWARENESS_CLIENTS
from tests.conftest import RunningServer
from tests.ws.support import NS, mint

WAIT_S = 5.0


def states(clients: list[tuple[int, int, str]]) -> bytes:
    """An awareness update of ``(client, clock, JSON state)`` (ASCII states)."""
    encoder = Encoder()
    encoder.write_var_uint(len(clients))
    for client_id, clock, state in clients:
        encoder.write_var_uint(client_id)
        encoder.write_var_uint(clock)
        encoder.write_var_string(state)
    return encoder.to_bytes()


async def next_awareness(ws: websockets.ClientConnection, wait_s: float = WAIT_S) -> bytes:
    """The awareness update of the next awareness message."""
    while True:
        message = await asyncio.wait_for(ws.recv(), wait_s)
        assert isinstance(message, bytes)
        if message[:1] == b"\x01":
            return Decoder(message[1:]).read_message()


async def test_a_newcomer_echoing_a_crowded_rooms_states_stays_connected(
    server: RunningServer,
) -> None:
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/crowded?token={mint()}"
    half = MAX_AWARENESS_CLIENTS // 2 + 1  # two connections: more than the limit in all
    first = [(1000 + i, 1, f'{{"n":{1000 + i}}}') for i in range(half)]
    second = [(2000 + i, 1, f'{{"n":{2000 + i}}}') for i in range(half)]
    async with (
        websockets.connect(url, ping_interval=None) as a,
        websockets.connect(url, ping_interval=None) as b,
    ):
        await a.send(awareness_message(states(first)))
        await b.send(awareness_message(states(second)))
        await next_awareness(a)  # b's states reached a: both are in the room
        async with websockets.connect(url, ping_interval=None) as newcomer:
            room = await next_awareness(newcomer)  # the opening's states
            assert room.count(b'"n":') == 2 * half > MAX_AWARENESS_CLIENTS
            await newcomer.send(awareness_message(room))  # the provider's echo
            await newcomer.send(awareness_message(states([(77, 1, '{"n":77}')])))
            # Not closed: its own client reaches the others.
            seen = b""
            for _ in range(int(WAIT_S / 0.2)):
                if b'"n":77' in seen:
                    break
                assert newcomer.close_code is None, newcomer.close_reason
                with contextlib.suppress(TimeoutError):
                    seen += await next_awareness(a, 0.2)
            assert b'"n":77' in seen
