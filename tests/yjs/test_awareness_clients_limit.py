"""MAX_AWARENESS_CLIENTS at its edge on a real y-websocket connection: a
connection may announce that many awareness clients (and, one removed,
another in its place); one more closes it 1008 and nobody sees it."""

from __future__ import annotations

import asyncio

import pytest
import websockets
from pycrdt import Encoder

from syncd.yjs.protocol import awareness_message
from syncd.yjs.room import MAX_AWARENESS_CLIENTS
from tests.conftest import RunningServer
from tests.ws.support import NS, mint

WAIT_S = 5.0


def awareness(client_id: int, clock: int, state: str) -> bytes:
    encoder = Encoder()
    encoder.write_var_uint(1)
    encoder.write_var_uint(client_id)
    encoder.write_var_uint(clock)
    encoder.write_var_string(state)  # ASCII: pycrdt writes the length in characters
    return awareness_message(encoder.to_bytes())


async def announced_to_a_newcomer(url: str) -> set[int]:
    """The clients a fresh peer of the room is told of (their states name them)."""
    async with websockets.connect(url, ping_interval=None) as ws:
        await ws.send(b"\x03")  # query awareness
        while True:
            message = await asyncio.wait_for(ws.recv(), WAIT_S)
            assert isinstance(message, bytes)
            if message[:1] == b"\x01":
                return {int(n) for n in message.split(b'"n":')[1:] for n in [n.split(b"}")[0]]}


async def test_max_awareness_clients_are_relayed_one_more_closes_1008(
    server: RunningServer,
) -> None:
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/crowd?token={mint()}"
    ids = list(range(1000, 1000 + MAX_AWARENESS_CLIENTS))
    async with websockets.connect(url, ping_interval=None) as ws:
        for client_id in ids:
            await ws.send(awareness(client_id, 1, f'{{"n":{client_id}}}'))
        # one removed (state null) and another in its place: still at the limit
        await ws.send(awareness(ids[0], 2, "null"))
        await ws.send(awareness(5000, 1, '{"n":5000}'))
        expected = set(ids[1:]) | {5000}
        for _ in range(int(WAIT_S / 0.05)):
            if await announced_to_a_newcomer(url) == expected:
                break
            await asyncio.sleep(0.05)
        assert await announced_to_a_newcomer(url) == expected
        async with websockets.connect(url, ping_interval=None) as observer:
            await ws.send(awareness(6000, 1, '{"n":6000}'))
            with pytest.raises(websockets.ConnectionClosed):
                while True:
                    await asyncio.wait_for(ws.recv(), WAIT_S)
            assert ws.close_code == 1008 and str(MAX_AWARENESS_CLIENTS) in ws.close_reason
            # the observer hears the closed connection's clients leave, never 6000
            seen = b""
            while b"null" not in seen:
                seen += await asyncio.wait_for(observer.recv(), WAIT_S)  # type: ignore[operator]
            assert b'"n":6000' not in seen
