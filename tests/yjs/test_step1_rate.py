"""A Yjs peer's sync step 1 counts against the token's rate limit, as an update does.

Each step 1 is answered with what its state vector lacks: with an empty one,
the whole document, an encode of up to megabytes. Repeated, it was free, and
backpressure bounded it only by how fast the peer reads. Now each step 1 but
the first on a document (the join, which the upgrade or the Hocuspocus auth
already counted) counts; over the limit its answer waits, as an update does
(y-websocket cannot be told to slow down, Hocuspocus has no refusal for it).
The root admin secret stays unlimited. Both protocols, on a real socket.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import websockets
from pycrdt import Doc, Encoder, Text

from syncd.auth.permissions import Rule, V2Permissions
from syncd.yjs import hocuspocus
from syncd.yjs.protocol import SYNC_STEP2, sync_step1
from tests.conftest import ADMIN, RunningServer
from tests.ws.support import NS, mint

WAIT_S = 5.0
"""Upper bound on any one answer (a wait for the limit is about a second)."""

JOIN_MAX_S = 0.5
"""The join's answer comes well before a wait for the limit (1 s) would end."""

WAITED_MIN_S = 0.8
"""A step 1 over the limit waits for the window: about a second."""

PACED_MIN_S = 1.8
"""Answers beyond twice the limit span two windows: about 2 s, not at once."""

EMPTY_STATE_VECTOR = b"\x00"
ROOM = "notes"

Send = Callable[[bytes], Awaitable[None]]
Step2 = Callable[[], Awaitable[bytes]]


def _limited(rate_limit: int) -> str:
    """A token that may read and write everything, at ``rate_limit`` per second."""
    everything = (Rule("*"),)
    return mint(permissions=V2Permissions(everything, everything, rate_limit=rate_limit))


def _string(text: str) -> bytes:
    encoder = Encoder()
    encoder.write_var_string(text)
    return encoder.to_bytes()


def _text_update(text: str) -> bytes:
    doc: Doc[Any] = Doc()
    doc.get("content", type=Text).insert(0, text)
    return doc.get_update()


def _is_step2(message: bytes) -> bool:
    return message[:2] == bytes((0, SYNC_STEP2))


@asynccontextmanager
async def y_websocket(server: RunningServer, token: str) -> AsyncIterator[tuple[Send, Step2]]:
    """A y-websocket peer (the upgrade counts once): send a message, await
    the next step 2."""
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/{ROOM}?token={token}"
    async with websockets.connect(url, ping_interval=None) as ws:

        async def step2() -> bytes:
            while True:
                message = await asyncio.wait_for(ws.recv(), WAIT_S)
                assert isinstance(message, bytes)
                if _is_step2(message):
                    return message

        yield ws.send, step2


@asynccontextmanager
async def hocuspocus_peer(server: RunningServer, token: str) -> AsyncIterator[tuple[Send, Step2]]:
    """A Hocuspocus peer with one document authenticated (the auth counts
    once): send a message for it, await its next step 2."""
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

        async def step2() -> bytes:
            while True:
                rest = await next_of(0)
                if rest[:1] == bytes((SYNC_STEP2,)):
                    return rest

        yield send, step2


PEERS = [
    pytest.param(y_websocket, id="y-websocket"),
    pytest.param(hocuspocus_peer, id="hocuspocus"),
]


async def _seed(server: RunningServer) -> None:
    """Give the document some content, so each step 2 is a real encode."""
    update = base64.b64encode(_text_update("x" * 10_000)).decode("ascii")
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post(
            f"/v1/namespaces/{NS}/crdts/yd:{ROOM}/ops",
            json={"op": "update", "update": update},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert response.status_code == 200, response.text


@pytest.mark.parametrize("peer", PEERS)
async def test_the_join_is_free_and_the_next_step1_waits(server: RunningServer, peer: Any) -> None:
    # A limit of 1: the upgrade (or the document's auth) takes it all. The
    # join's step 1 is not delayed; counted, it would wait a second.
    async with peer(server, _limited(1)) as (send, step2):
        started = time.monotonic()
        await send(sync_step1(EMPTY_STATE_VECTOR))
        await step2()
        assert time.monotonic() - started < JOIN_MAX_S
        # The second is counted: it waits for the window.
        started = time.monotonic()
        await send(sync_step1(EMPTY_STATE_VECTOR))
        await step2()
        assert time.monotonic() - started >= WAITED_MIN_S


@pytest.mark.parametrize("peer", PEERS)
async def test_repeated_step1s_are_paced_by_the_limit(server: RunningServer, peer: Any) -> None:
    await _seed(server)
    rate_limit = 3
    async with peer(server, _limited(rate_limit)) as (send, step2):
        await send(sync_step1(EMPTY_STATE_VECTOR))  # the join: free
        await step2()
        # With the upgrade or auth, 3 * rate_limit units: three windows.
        count = 3 * rate_limit - 1
        started = time.monotonic()
        for _ in range(count):
            await send(sync_step1(EMPTY_STATE_VECTOR))
        for _ in range(count):
            assert b"x" * 100 in await step2()  # each the whole document
        assert time.monotonic() - started >= PACED_MIN_S


@pytest.mark.parametrize("peer", PEERS)
async def test_the_admin_secret_is_not_limited(make_server: Any, peer: Any) -> None:
    server: RunningServer = await make_server(rate_limit=1)
    async with peer(server, ADMIN) as (send, step2):
        started = time.monotonic()
        for _ in range(30):
            await send(sync_step1(EMPTY_STATE_VECTOR))
        for _ in range(30):
            await step2()
        assert time.monotonic() - started < JOIN_MAX_S
