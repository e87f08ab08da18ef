"""A Yjs peer that lagged gets the room's current awareness once it drains
(syncd/yjs/channel.py, ``send_awareness`` and ``drained``).

A peer that leaves more than the subscriber bound unread is skipped, and
sent the whole document once its socket drains. Awareness updates were
skipped too, and nothing made up for them: the peer kept the cursors it
had when it fell behind (a removed one included) and lacked the ones that
came meanwhile until each client renewed its state, up to 30 s later. The
server is real; the lagging peer's socket has small buffers and is not read
until the test says.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import websockets
from pycrdt import Awareness, Decoder, Doc, Encoder, Text

from syncd.crdt.ydoc import b64
from syncd.wire import WS_OPCODE_BINARY
from syncd.yjs.protocol import awareness_message
from tests.ws.support import NS, mint, wait_for
from tests.yjs.support import ROOM, stalled_yjs_peer

DOC = f"yd:{ROOM}"
BOUND = 16 * 1024
"""The subscriber buffer: a peer with more than this unread is skipped."""
EDIT_CHARS = 2000
CATCH_UP_S = 5.0

GONE = 8
"""A client the lagging peer saw, removed while it lagged."""
MOVED = 7
"""A client announced while the peer lagged, then changed."""


def _update(client: int, clock: int, state: dict[str, Any] | None) -> bytes:
    encoder = Encoder()
    encoder.write_var_uint(1)
    encoder.write_var_uint(client)
    encoder.write_var_uint(clock)
    encoder.write_var_string(json.dumps(state))
    return encoder.to_bytes()


def _peer_states(awareness: Awareness) -> dict[int, Any]:
    own = awareness.client_id
    return {client: state for client, state in awareness.states.items() if client != own}


async def test_a_lagged_peer_gets_the_rooms_current_awareness_once_it_drains(
    make_server: Any,
) -> None:
    server = await make_server(subscriber_buffer_bytes=BOUND)
    token = mint()
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/{ROOM}?token={token}"
    writer: Doc[Any] = Doc()
    text = writer.get("content", type=Text)
    async with httpx.AsyncClient(
        base_url=server.url, headers={"authorization": f"Bearer {token}"}
    ) as client:

        async def edit(at: int) -> None:
            before = writer.get_state()
            text.insert(len(text), f"<{at}>" + "x" * EDIT_CHARS)
            r = await client.post(
                f"/v1/namespaces/{NS}/crdts/{DOC}/ops",
                json={"op": "update", "update": b64(writer.get_update(before))},
            )
            assert r.status_code == 200, r.text

        await edit(0)
        raw, connection = await stalled_yjs_peer(server, token)
        room = connection.channel.room
        async with (
            websockets.connect(url, ping_interval=None, max_queue=None) as leaving,
            websockets.connect(url, ping_interval=None, max_queue=None) as staying,
        ):
            # Seen by the peer before it lags.
            await leaving.send(awareness_message(_update(GONE, 1, {"name": "gone"})))
            await wait_for(lambda: GONE in room.awareness.states)
            edits = 1
            while not connection.write_paused:
                assert edits < 300, "the peer never lagged"
                await edit(edits)
                edits += 1

            # While it lags: a newcomer's client, which then moves, and a removal.
            await staying.send(awareness_message(_update(MOVED, 1, {"cursor": 1})))
            await leaving.close()
            await staying.send(awareness_message(_update(MOVED, 2, {"cursor": 2})))
            await wait_for(
                lambda: (
                    GONE not in room.awareness.states
                    and room.awareness.states.get(MOVED) == {"cursor": 2}
                )
            )
            assert connection.write_paused

            # The peer reads again: once drained, it holds the room's awareness.
            seen = Awareness(Doc())
            expected = {MOVED: {"cursor": 2}}

            async def caught_up() -> None:
                while _peer_states(seen) != expected:
                    opcode, payload = await raw.frame()
                    if opcode == WS_OPCODE_BINARY and payload[0] == 1:
                        seen.apply_awareness_update(Decoder(payload[1:]).read_message(), "server")

            try:
                await asyncio.wait_for(caught_up(), CATCH_UP_S)
            except TimeoutError:
                raise AssertionError(f"the peer holds {_peer_states(seen)}") from None
            raw.close()
