"""An awareness update that takes a connection past its awareness clients
(docs/yjs.md#awareness) is refused whole, on a real server: the connection
is closed 1008, and the others of the room never see the clients it
announced, neither relayed nor as the room's states given to a newcomer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets
from pycrdt import Encoder

from syncd.yjs.protocol import awareness_message, sync_step1
from syncd.yjs.room import MAX_AWARENESS_CLIENTS
from tests.conftest import RunningServer
from tests.http.support import issue

WAIT_S = 5.0
FIRST_ID = 5000


def _clients(count: int) -> bytes:
    """One awareness message announcing ``count`` clients at once."""
    encoder = Encoder()
    encoder.write_var_uint(count)
    for i in range(count):
        encoder.write_var_uint(FIRST_ID + i)
        encoder.write_var_uint(1)
        encoder.write_var_string('{"user":"forged"}')
    return awareness_message(encoder.to_bytes())


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


async def _joined(url: str) -> Any:
    """A connection past its opening: our step 1 answered by the server's step 2."""
    ws = await websockets.connect(url)
    await ws.send(sync_step1(b"\x00"))
    while (await asyncio.wait_for(ws.recv(), WAIT_S))[:2] != b"\x00\x01":
        pass
    return ws


async def _awareness_seen(ws: Any, quiet_s: float = 0.3) -> list[bytes]:
    """The awareness messages ``ws`` gets until it is quiet for ``quiet_s``."""
    seen: list[bytes] = []
    try:
        while True:
            message = await asyncio.wait_for(ws.recv(), quiet_s)
            if message[:1] == b"\x01":
                seen.append(message)
    except TimeoutError:
        pass
    return seen


async def test_an_update_past_the_awareness_limit_reaches_nobody(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    token = (await issue(client))["authorization"].removeprefix("Bearer ")
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/notes?token={token}"
    watcher = await _joined(url)
    sender = await _joined(url)
    await sender.send(_clients(MAX_AWARENESS_CLIENTS + 1))
    with pytest.raises(websockets.ConnectionClosed):
        while True:
            await asyncio.wait_for(sender.recv(), WAIT_S)
    assert sender.close_code == 1008
    assert all(b"forged" not in m for m in await _awareness_seen(watcher))
    newcomer = await _joined(url)
    assert all(b"forged" not in m for m in await _awareness_seen(newcomer))
    # The limit itself is allowed, and relayed.
    sender = await _joined(url)
    await sender.send(_clients(MAX_AWARENESS_CLIENTS))
    assert any(b"forged" in m for m in await _awareness_seen(watcher))
    for ws in (watcher, newcomer, sender):
        await ws.close()
