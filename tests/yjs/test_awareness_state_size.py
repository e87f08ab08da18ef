"""An awareness state over MAX_AWARENESS_STATE_BYTES is refused whole, on a
real server: the connection is closed 1008 and nobody sees the state. The
room keeps every state for its newcomers: unbounded, one connection put 64
states of a whole message each in it (64 MB, sent again to every newcomer)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
import websockets
from pycrdt import Encoder

from syncd.yjs.protocol import awareness_message
from syncd.yjs.room import MAX_AWARENESS_STATE_BYTES
from tests.conftest import RunningServer
from tests.http.support import issue
from tests.yjs.test_awareness_refused import WAIT_S, _awareness_seen, _joined

CLIENT_ID = 4242


def _state(size: int, marker: str) -> bytes:
    """An awareness message giving one client a JSON state of ``size`` bytes."""
    head = '{"user":"' + marker
    state = head + "x" * (size - len(head) - 2) + '"}'
    assert len(state.encode()) == size
    encoder = Encoder()
    encoder.write_var_uint(1)
    encoder.write_var_uint(CLIENT_ID)
    encoder.write_var_uint(1)
    encoder.write_var_string(state)
    return awareness_message(encoder.to_bytes())


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


async def test_an_awareness_state_over_the_limit_reaches_nobody(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    token = (await issue(client))["authorization"].removeprefix("Bearer ")
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/notes?token={token}"
    watcher = await _joined(url)
    sender = await _joined(url)
    await sender.send(_state(MAX_AWARENESS_STATE_BYTES + 1, "forged"))
    with pytest.raises(websockets.ConnectionClosed):
        while True:
            await asyncio.wait_for(sender.recv(), WAIT_S)
    assert sender.close_code == 1008
    assert "awareness state" in (sender.close_reason or "")
    assert all(b"forged" not in m for m in await _awareness_seen(watcher))
    newcomer = await _joined(url)
    assert all(b"forged" not in m for m in await _awareness_seen(newcomer))
    # A state of the limit itself is relayed.
    allowed = await _joined(url)
    await allowed.send(_state(MAX_AWARENESS_STATE_BYTES, "kept"))
    assert any(b"kept" in m for m in await _awareness_seen(watcher))
    for ws in (watcher, newcomer, allowed):
        await ws.close()
