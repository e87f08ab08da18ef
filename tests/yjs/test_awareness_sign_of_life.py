"""A connection's awareness update comes back to it too, as y-websocket's
server and Hocuspocus's send it to every connection of the document.
Providers take only a message as a sign of life (WebSocket pings are not
seen by a browser's or ``ws``'s message handler): y-websocket and
``@hocuspocus/provider`` close a socket that brought none for 30 s, and
count on their own awareness, renewed every 15 s, coming back. A provider
alone in its room was sent nothing else, so it reconnected every 30 s."""

from __future__ import annotations

import asyncio

import httpx
import websockets
from pycrdt import Decoder, Encoder

from syncd.yjs import hocuspocus
from syncd.yjs.protocol import awareness_message
from tests.conftest import RunningServer
from tests.http.support import issue
from tests.ws.support import NS, mint
from tests.yjs.test_hocuspocus import Socket, _token, auth, on

WAIT_S = 5.0


def state(client_id: int, clock: int) -> bytes:
    encoder = Encoder()
    encoder.write_var_uint(1)
    encoder.write_var_uint(client_id)
    encoder.write_var_uint(clock)
    encoder.write_var_string(f'{{"n":{client_id}}}')
    return encoder.to_bytes()


async def test_a_lone_y_websocket_peer_gets_its_awareness_back(server: RunningServer) -> None:
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/alone?token={mint()}"
    async with websockets.connect(url, ping_interval=None) as ws:
        for clock in (1, 2):  # the first announce, then a renewal
            await ws.send(awareness_message(state(42, clock)))
            while True:
                message = await asyncio.wait_for(ws.recv(), WAIT_S)
                assert isinstance(message, bytes)
                if message[:1] == b"\x01":
                    break
            assert Decoder(message[1:]).read_message() == state(42, clock)


async def test_a_lone_hocuspocus_document_gets_its_awareness_back(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        token = _token(await issue(client))
    s = Socket(
        await websockets.connect(
            f"ws://127.0.0.1:{server.port}/v1/namespaces/app/hocuspocus", ping_interval=None
        )
    )
    await s.ws.send(auth("alone", token))
    assert (await s.next("alone", hocuspocus.MESSAGE_AUTH))[0] == hocuspocus.AUTH_AUTHENTICATED
    await s.ws.send(on("alone", awareness_message(state(43, 1))))
    assert Decoder(await s.next("alone", 1)).read_message() == state(43, 1)
    await s.ws.close()
