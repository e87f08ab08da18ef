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

import base64
import time
from functools import partial
from typing import Any

import httpx
import pytest
from pycrdt import Doc, Text

from syncd.yjs.protocol import SYNC_STEP2, sync_step1
from tests.conftest import ADMIN, RunningServer
from tests.ws.support import NS
from tests.yjs.support import ROOM, hocuspocus_peer, limited, y_websocket

JOIN_MAX_S = 0.5
"""The join's answer comes well before a wait for the limit (1 s) would end."""

WAITED_MIN_S = 0.8
"""A step 1 over the limit waits for the window: about a second."""

PACED_MIN_S = 1.8
"""Answers beyond twice the limit span two windows: about 2 s, not at once."""

EMPTY_STATE_VECTOR = b"\x00"


def _text_update(text: str) -> bytes:
    doc: Doc[Any] = Doc()
    doc.get("content", type=Text).insert(0, text)
    return doc.get_update()


def _step2(message: bytes) -> bytes | None:
    """A step 2, the answer to a step 1 (None for another message)."""
    return message if message[:2] == bytes((0, SYNC_STEP2)) else None


PEERS = [
    pytest.param(partial(y_websocket, wanted=_step2), id="y-websocket"),
    pytest.param(partial(hocuspocus_peer, wanted=_step2), id="hocuspocus"),
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
    async with peer(server, limited(1)) as (send, step2):
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
    async with peer(server, limited(rate_limit)) as (send, step2):
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
async def test_the_admin_secret_is_notlimited(make_server: Any, peer: Any) -> None:
    server: RunningServer = await make_server(rate_limit=1)
    async with peer(server, ADMIN) as (send, step2):
        started = time.monotonic()
        for _ in range(30):
            await send(sync_step1(EMPTY_STATE_VECTOR))
        for _ in range(30):
            await step2()
        assert time.monotonic() - started < JOIN_MAX_S
