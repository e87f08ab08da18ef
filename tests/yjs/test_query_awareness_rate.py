"""A Yjs peer's query-awareness counts against the token's rate limit, as a
repeated sync step 1 does.

A query-awareness is one byte (seven with a Hocuspocus document's name), and
each was answered with every awareness state of the room, with nothing to
bound how often: an amplification. Now each one counts, the first too (no
provider sends one: our opening carries the room's states); over the limit
its answer waits, as an update's write does (y-websocket cannot be told to
slow down, Hocuspocus has no refusal for it). The root admin secret stays
unlimited. Both protocols, on a real socket.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import websockets
from pycrdt import Encoder

from syncd.auth.permissions import Rule, V2Permissions
from syncd.yjs import hocuspocus
from syncd.yjs.protocol import (
    MESSAGE_AWARENESS,
    MESSAGE_QUERY_AWARENESS,
    Reader,
    awareness_message,
)
from tests.conftest import ADMIN, RunningServer
from tests.ws.support import NS, mint

WAIT_S = 5.0
"""Upper bound on any one answer (a wait for the limit is about a second)."""

AT_ONCE_MAX_S = 0.5
"""An answer within the limit comes well before a wait for it (1 s) would end."""

WAITED_MIN_S = 0.8
"""A query over the limit waits for the window: about a second."""

PACED_MIN_S = 1.8
"""Answers beyond twice the limit span two windows: about 2 s, not at once."""

ROOM = "notes"
CLIENT_ID = 4242
MARKER = "query-awareness-marker"

QUERY = bytes((MESSAGE_QUERY_AWARENESS,))

Send = Callable[[bytes], Awaitable[None]]
Awareness = Callable[[], Awaitable[bytes]]
"""The next awareness update the peer is sent."""


def _limited(rate_limit: int) -> str:
    """A token that may read and write everything, at ``rate_limit`` per second."""
    everything = (Rule("*"),)
    return mint(permissions=V2Permissions(everything, everything, rate_limit=rate_limit))


def _string(text: str) -> bytes:
    encoder = Encoder()
    encoder.write_var_string(text)
    return encoder.to_bytes()


def _announce() -> bytes:
    """An awareness message giving one client a state: the room keeps it,
    so each query is answered with it."""
    update = Encoder()
    update.write_var_uint(1)
    update.write_var_uint(CLIENT_ID)
    update.write_var_uint(1)
    update.write_var_string(f'{{"user":"{MARKER}"}}')
    return awareness_message(update.to_bytes())


def _awareness_update(message: bytes) -> bytes | None:
    """The update of an awareness message, None for another message."""
    reader = Reader(message)
    if reader.var_uint() != MESSAGE_AWARENESS:
        return None
    return reader.byte_string()


@asynccontextmanager
async def y_websocket(server: RunningServer, token: str) -> AsyncIterator[tuple[Send, Awareness]]:
    """A y-websocket peer (the upgrade counts once): send a message, await
    the next awareness update."""
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/{ROOM}?token={token}"
    async with websockets.connect(url, ping_interval=None) as ws:

        async def awareness() -> bytes:
            while True:
                message = await asyncio.wait_for(ws.recv(), WAIT_S)
                assert isinstance(message, bytes)
                update = _awareness_update(message)
                if update is not None:
                    return update

        yield ws.send, awareness


@asynccontextmanager
async def hocuspocus_peer(
    server: RunningServer, token: str
) -> AsyncIterator[tuple[Send, Awareness]]:
    """A Hocuspocus peer with one document authenticated (the auth counts
    once): send a message for it, await its next awareness update."""
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/hocuspocus"
    prefix = _string(ROOM)
    async with websockets.connect(url, ping_interval=None) as ws:

        async def next_of(kind: int) -> bytes:
            while True:
                data = await asyncio.wait_for(ws.recv(), WAIT_S)
                assert isinstance(data, bytes)
                name, got, rest = hocuspocus.parse(data)
                if name == ROOM and got == kind:
                    return rest

        await ws.send(prefix + b"\x02\x00" + _string(token) + _string("3.4.4"))
        assert (await next_of(hocuspocus.MESSAGE_AUTH))[0] == hocuspocus.AUTH_AUTHENTICATED

        async def send(message: bytes) -> None:
            await ws.send(prefix + message)

        async def awareness() -> bytes:
            return Reader(await next_of(MESSAGE_AWARENESS)).byte_string()

        yield send, awareness


PEERS = [
    pytest.param(y_websocket, id="y-websocket"),
    pytest.param(hocuspocus_peer, id="hocuspocus"),
]


@pytest.mark.parametrize("peer", PEERS)
async def test_a_query_within_the_limit_is_answered_at_once(
    server: RunningServer, peer: Any
) -> None:
    async with peer(server, _limited(10)) as (send, awareness):
        await send(_announce())  # not counted: relayed, answered by nothing
        started = time.monotonic()
        await send(QUERY)
        assert MARKER.encode() in await awareness()
        assert time.monotonic() - started < AT_ONCE_MAX_S


@pytest.mark.parametrize("peer", PEERS)
async def test_the_first_query_counts_and_waits_over_the_limit(
    server: RunningServer, peer: Any
) -> None:
    # A limit of 1: the upgrade (or the document's auth) takes it all. No
    # provider sends a query on connect, so even the first is counted.
    async with peer(server, _limited(1)) as (send, awareness):
        await send(_announce())
        started = time.monotonic()
        await send(QUERY)
        assert MARKER.encode() in await awareness()
        assert time.monotonic() - started >= WAITED_MIN_S


@pytest.mark.parametrize("peer", PEERS)
async def test_repeated_queries_are_paced_by_the_limit(server: RunningServer, peer: Any) -> None:
    rate_limit = 3
    async with peer(server, _limited(rate_limit)) as (send, awareness):
        await send(_announce())
        # With the upgrade or auth, 3 * rate_limit units: three windows.
        count = 3 * rate_limit - 1
        started = time.monotonic()
        for _ in range(count):
            await send(QUERY)
        for _ in range(count):
            assert MARKER.encode() in await awareness()  # each answered, in the end
        assert time.monotonic() - started >= PACED_MIN_S


@pytest.mark.parametrize("peer", PEERS)
async def test_the_admin_secret_is_not_limited(make_server: Any, peer: Any) -> None:
    server: RunningServer = await make_server(rate_limit=1)
    async with peer(server, ADMIN) as (send, awareness):
        await send(_announce())
        started = time.monotonic()
        for _ in range(30):
            await send(QUERY)
        for _ in range(30):
            await awareness()
        assert time.monotonic() - started < AT_ONCE_MAX_S
