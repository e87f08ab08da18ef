"""An awareness update naming more than MAX_AWARENESS_UPDATE_CLIENTS clients
is ignored unread. Awareness is not counted against the rate limit, and
every client of an update was read twice in Python (syncd's check, then
pycrdt's): one message of null states at the body limit (some 110 000
clients in 1 MiB) held the event loop for about a second, every server's
connection with it, and a peer could send them back to back. A provider
names its own client (one, at most 64 per connection) or, echoing what it
was sent, clients the room already holds: ignoring such an echo changes
nothing, so the connection is not closed either."""

from __future__ import annotations

import asyncio

import websockets
from pycrdt import Encoder

from syncd.yjs.protocol import awareness_message
from syncd.yjs.room import MAX_AWARENESS_UPDATE_CLIENTS
from tests.conftest import RunningServer
from tests.ws.support import NS, mint
from tests.yjs.test_awareness_echo import next_awareness, states

WAIT_S = 5.0
ROOM = "many-entries"


def nulls_then(count: int, last: tuple[int, int, str]) -> bytes:
    """``count`` null states of new clients, then ``last``."""
    encoder = Encoder()
    encoder.write_var_uint(count + 1)
    for client_id in range(10_000, 10_000 + count):
        encoder.write_var_uint(client_id)
        encoder.write_var_uint(1)
        encoder.write_var_string("null")
    client_id, clock, state = last
    encoder.write_var_uint(client_id)
    encoder.write_var_uint(clock)
    encoder.write_var_string(state)
    return awareness_message(encoder.to_bytes())


async def test_an_update_of_too_many_clients_is_ignored_and_the_socket_goes_on(
    server: RunningServer,
) -> None:
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/{ROOM}?token={mint()}"
    async with (
        websockets.connect(url, ping_interval=None) as peer,
        websockets.connect(url, ping_interval=None) as witness,
    ):
        await peer.send(nulls_then(MAX_AWARENESS_UPDATE_CLIENTS, (5, 1, '{"n":"ignored"}')))
        await peer.send(awareness_message(states([(6, 1, '{"n":"relayed"}')])))
        seen = b""
        while b"relayed" not in seen:
            seen += await next_awareness(witness)
        assert b"ignored" not in seen
        room = server.app.rooms._rooms[(NS, "yd:" + ROOM)]
        assert 5 not in room.awareness.meta and 10_000 not in room.awareness.meta
        assert peer.close_code is None
        # At the bound, an update is read and applied as before.
        await peer.send(nulls_then(MAX_AWARENESS_UPDATE_CLIENTS - 1, (7, 1, '{"n":"read"}')))
        while b'"n":"read"' not in seen:
            seen += await asyncio.wait_for(next_awareness(witness), WAIT_S)
