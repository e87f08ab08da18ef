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

import time
from functools import partial
from typing import Any

import pytest
from pycrdt import Encoder

from syncd.yjs.protocol import (
    MESSAGE_AWARENESS,
    MESSAGE_QUERY_AWARENESS,
    Reader,
    awareness_message,
)
from tests.conftest import ADMIN, RunningServer
from tests.yjs.support import hocuspocus_peer, limited, y_websocket

AT_ONCE_MAX_S = 0.5
"""An answer within the limit comes well before a wait for it (1 s) would end."""

WAITED_MIN_S = 0.8
"""A query over the limit waits for the window: about a second."""

PACED_MIN_S = 1.8
"""Answers beyond twice the limit span two windows: about 2 s, not at once."""

CLIENT_ID = 4242
MARKER = "query-awareness-marker"

QUERY = bytes((MESSAGE_QUERY_AWARENESS,))


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


PEERS = [
    pytest.param(partial(y_websocket, wanted=_awareness_update), id="y-websocket"),
    pytest.param(partial(hocuspocus_peer, wanted=_awareness_update), id="hocuspocus"),
]


@pytest.mark.parametrize("peer", PEERS)
async def test_a_query_within_the_limit_is_answered_at_once(
    server: RunningServer, peer: Any
) -> None:
    async with peer(server, limited(10)) as (send, awareness):
        await send(_announce())  # not counted: relayed, answered by nothing
        assert MARKER.encode() in await awareness()  # it comes back to its sender
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
    async with peer(server, limited(1)) as (send, awareness):
        await send(_announce())
        assert MARKER.encode() in await awareness()  # it comes back to its sender
        started = time.monotonic()
        await send(QUERY)
        assert MARKER.encode() in await awareness()
        assert time.monotonic() - started >= WAITED_MIN_S


@pytest.mark.parametrize("peer", PEERS)
async def test_repeated_queries_are_paced_by_the_limit(server: RunningServer, peer: Any) -> None:
    rate_limit = 3
    async with peer(server, limited(rate_limit)) as (send, awareness):
        await send(_announce())
        assert MARKER.encode() in await awareness()  # it comes back to its sender
        # With the upgrade or auth, 3 * rate_limit units: three windows.
        count = 3 * rate_limit - 1
        started = time.monotonic()
        for _ in range(count):
            await send(QUERY)
        for _ in range(count):
            assert MARKER.encode() in await awareness()  # each answered, in the end
        assert time.monotonic() - started >= PACED_MIN_S


@pytest.mark.parametrize("peer", PEERS)
async def test_the_admin_secret_is_notlimited(make_server: Any, peer: Any) -> None:
    server: RunningServer = await make_server(rate_limit=1)
    async with peer(server, ADMIN) as (send, awareness):
        await send(_announce())
        assert MARKER.encode() in await awareness()  # it comes back to its sender
        started = time.monotonic()
        for _ in range(30):
            await send(QUERY)
        for _ in range(30):
            await awareness()
        assert time.monotonic() - started < AT_ONCE_MAX_S
