"""YjsProvider after its connection drops (the server goes on): the
awareness state it had set comes back by itself for the other peers, as
with y-websocket; one it had cleared (``set_awareness(None)``) does not; and
peers that left while it was away are not shown for ever.

The drop is real: one provider talks to the in-process server through a TCP
relay that the test cuts (and keeps refusing until it resumes)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pycrdt import Doc

from syncd.client.yjs import YjsProvider
from tests.conftest import RunningServer
from tests.http.support import issue

WAIT_S = 5.0
"""Well under the provider's 15 s renewal, which would hide a missing re-announce."""


class Relay:
    """A TCP relay to ``port`` whose connections can be cut."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.open = True
        self.url = ""

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.open:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._port)
        self._writers |= {writer, up_writer}
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    def cut(self) -> None:
        """Drop every connection (a reset, as a lost network gives) and refuse new ones."""
        self.open = False
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@pytest.fixture
async def relay(server: RunningServer) -> AsyncIterator[Relay]:
    relay = Relay(server.port)
    await relay.start()
    yield relay
    await relay.close()


async def _eventually(check: Any) -> None:
    async with asyncio.timeout(WAIT_S):
        while not check():
            await asyncio.sleep(0.02)


async def _token(server: RunningServer) -> str:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
    return h["authorization"].removeprefix("Bearer ")


async def _drop(provider: YjsProvider, relay: Relay) -> None:
    """Cut ``provider``'s connection, wait until it knows, let it back in."""
    relay.cut()
    await _eventually(lambda: not provider.synced.is_set())
    relay.open = True
    await asyncio.wait_for(provider.synced.wait(), WAIT_S)


async def test_the_state_set_is_announced_again_after_a_drop(
    server: RunningServer, relay: Relay
) -> None:
    token = await _token(server)
    url = relay.url
    ada = {"user": {"name": "ada"}}
    async with (
        YjsProvider(url, "app", "room", Doc(), token) as a,
        YjsProvider(server.url, "app", "room", Doc(), token) as b,
    ):
        await asyncio.wait_for(a.synced.wait(), WAIT_S)
        a.set_awareness(ada)
        await _eventually(lambda: list(b.awareness.values()) == [ada])
        relay.cut()
        await _eventually(lambda: not b.awareness)  # the server told b that a left
        relay.open = True
        await _eventually(lambda: list(b.awareness.values()) == [ada])
        async with YjsProvider(server.url, "app", "room", Doc(), token) as c:
            await _eventually(lambda: list(c.awareness.values()) == [ada])


async def test_a_cleared_state_stays_cleared(server: RunningServer, relay: Relay) -> None:
    token = await _token(server)
    url = relay.url
    async with (
        YjsProvider(url, "app", "gone", Doc(), token) as a,
        YjsProvider(server.url, "app", "gone", Doc(), token) as b,
    ):
        await asyncio.wait_for(a.synced.wait(), WAIT_S)
        a.set_awareness({"user": {"name": "ada"}})
        await _eventually(lambda: bool(b.awareness))
        a.set_awareness(None)
        await _eventually(lambda: not b.awareness)
        await _drop(a, relay)
        b.set_awareness({"user": {"name": "bob"}})  # traffic after a's return
        await _eventually(lambda: bool(a.awareness))
        await asyncio.sleep(0.2)
        assert not b.awareness


async def test_peers_that_left_meanwhile_are_not_kept(server: RunningServer, relay: Relay) -> None:
    token = await _token(server)
    url = relay.url
    async with YjsProvider(url, "app", "left", Doc(), token) as a:
        await asyncio.wait_for(a.synced.wait(), WAIT_S)
        b = YjsProvider(server.url, "app", "left", Doc(), token)
        async with b:
            b.set_awareness({"user": {"name": "bob"}})
            await _eventually(lambda: bool(a.awareness))
            relay.cut()
            await _eventually(lambda: not a.synced.is_set())
        relay.open = True  # b left while a was away: no one tells a
        await asyncio.wait_for(a.synced.wait(), WAIT_S)
        await asyncio.sleep(0.2)
        assert not a.awareness
