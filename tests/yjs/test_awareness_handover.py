"""An awareness client that another connection announced since is that
connection's: a provider that reconnects (a network change) announces its
client on the new socket while the server still holds the old one, which
goes only at its keepalive. Its leaving removed the client the new
connection holds: every peer dropped the live cursor until its next renewal,
and a newcomer did not see it."""

from __future__ import annotations

import websockets

from syncd.yjs.protocol import awareness_message
from tests.conftest import RunningServer
from tests.ws.support import NS, mint
from tests.yjs.test_awareness_echo import next_awareness, states

WAIT_S = 5.0
CLIENT = 4242


async def test_a_client_taken_over_stays_when_its_first_connection_goes(
    server: RunningServer,
) -> None:
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/handover?token={mint()}"
    async with (
        websockets.connect(url, ping_interval=None) as observer,
        websockets.connect(url, ping_interval=None) as new,
    ):
        async with websockets.connect(url, ping_interval=None) as old:
            await old.send(awareness_message(states([(CLIENT, 1, '{"at":"old"}')])))
            assert b'"at":"old"' in await next_awareness(observer)
            await new.send(awareness_message(states([(CLIENT, 2, '{"at":"new"}')])))
            assert b'"at":"new"' in await next_awareness(observer)
        # The old connection is gone: the observer hears nothing of it, and a
        # newcomer is told of the client, as the new connection announced it.
        with_removal: list[bytes] = []
        try:
            while True:
                with_removal.append(await next_awareness(observer, 0.5))
        except TimeoutError:
            pass
        assert not any(b"null" in update for update in with_removal)
        async with websockets.connect(url, ping_interval=None) as newcomer:
            assert b'"at":"new"' in await next_awareness(newcomer)
