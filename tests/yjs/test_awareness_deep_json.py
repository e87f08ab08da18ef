"""An awareness state of JSON nested deeper than Python's json reads (its
recursion limit, about a thousand levels; the 64 KiB state bound lets
~32,000 in) is a malformed awareness update: the connection is closed
with 1008 as for any state that is not JSON, and the server goes on."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import websockets

from syncd.yjs.protocol import awareness_message
from syncd.yjs.room import MAX_AWARENESS_STATE_BYTES
from tests.conftest import RunningServer
from tests.ws.support import NS, mint
from tests.yjs.test_awareness_echo import states

WAIT_S = 5.0
DEPTH = MAX_AWARENESS_STATE_BYTES // 2 - 1
"""Arrays nested as deep as the state bound lets in: two bytes a level."""


@pytest.mark.parametrize("opener", ["[", '{"a":'], ids=["arrays", "objects"])
async def test_deeply_nested_awareness_state_is_refused(server: RunningServer, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    depth = DEPTH if opener == "[" else MAX_AWARENESS_STATE_BYTES // 6
    state = opener * depth + "1" + closer * depth
    assert len(state) <= MAX_AWARENESS_STATE_BYTES
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/deep?token={mint()}"
    async with websockets.connect(url, ping_interval=None) as witness:
        async with websockets.connect(url, ping_interval=None) as bad:
            await bad.send(awareness_message(states([(41, 1, state)])))
            try:
                while True:
                    await asyncio.wait_for(bad.recv(), WAIT_S)
            except websockets.ConnectionClosed:
                pass
            assert bad.close_code == 1008
        await witness.send(awareness_message(states([(42, 1, '{"n":42}')])))
        while True:  # the room goes on: the witness's own state comes back
            message = await asyncio.wait_for(witness.recv(), WAIT_S)
            assert isinstance(message, bytes)
            if b'"n":42' in message:
                break
    async with httpx.AsyncClient() as client:
        live = await client.get(f"http://127.0.0.1:{server.port}/health/live")
    assert live.status_code == 200
