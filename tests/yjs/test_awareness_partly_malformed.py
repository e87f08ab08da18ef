"""An awareness update whose first clients read well and a later one does
not (a state that is not JSON) is refused whole (1008) before any of it is
applied. It was applied up to the bad state: the clients before it stayed
in the room, announced by no connection, so nothing removed them, and
every newcomer was given them for as long as the room lived."""

from __future__ import annotations

import asyncio

import websockets

from syncd.yjs.protocol import awareness_message
from tests.conftest import RunningServer
from tests.ws.support import NS, mint
from tests.yjs.test_awareness_echo import states

WAIT_S = 5.0


async def test_a_partly_malformed_awareness_update_leaves_nothing_behind(
    server: RunningServer,
) -> None:
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/partly?token={mint()}"
    async with websockets.connect(url, ping_interval=None) as witness:
        async with websockets.connect(url, ping_interval=None) as bad:
            await bad.send(awareness_message(states([(31, 1, '{"ghost":1}'), (32, 1, "{no")])))
            try:
                while True:
                    await asyncio.wait_for(bad.recv(), WAIT_S)
            except websockets.ConnectionClosed:
                pass
            assert bad.close_code == 1008
        await witness.send(b"\x03")  # query awareness: the room's states, if any
        await witness.send(awareness_message(states([(33, 1, '{"n":33}')])))
        while True:  # the room answers with what it holds: its own echo at least
            message = await asyncio.wait_for(witness.recv(), WAIT_S)
            assert isinstance(message, bytes)
            assert b"ghost" not in message
            if b'"n":33' in message:
                break
