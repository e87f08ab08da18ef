"""The keepalive of a peer that is busy taking a large snapshot: its ping
waits behind the snapshot, so it cannot answer before it has read the
snapshot; while it is reading, it is not the silent peer the keepalive
closes (a slow link with a large document would otherwise be closed before
every snapshot ended, and never sync)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tests.ws.support import client_frame, op, open_ws, parse_frame, stalled_peer

DOC = "lw:slow-link"
TEXT_BYTES = 300_000
"""A snapshot that takes a slow reader a few ping intervals to read."""
PING_S = 0.2
READ_BYTES = 8192
READ_EVERY_S = 0.01
"""The peer reads at most 800 KB/s (less through the small windows below):
the snapshot takes it past two ping intervals, the silence after which the
keepalive closes (checked below)."""


async def test_a_peer_reading_a_large_snapshot_slowly_is_not_closed(make_server: Any) -> None:
    server = await make_server(ws_ping_s=PING_S, subscriber_buffer_bytes=16384)
    async with open_ws(server) as writer:
        ack = await op(writer, DOC, {"op": "set", "value": "x" * TEXT_BYTES})
        assert ack["kind"] == "ack", ack

    raw, _ = await stalled_peer(server)
    raw.send(client_frame(0x1, json.dumps({"kind": "subscribe", "id": DOC}).encode()))

    # Read slowly, answering each ping as soon as it is read, as a browser does.
    started = time.monotonic()
    frames: list[tuple[int, bytes]] = []
    buffer = bytearray()
    while not any(opcode == 0x1 for opcode, _ in frames):
        chunk = await asyncio.wait_for(raw.reader.read(READ_BYTES), 5)
        assert chunk, f"closed after {frames!r}"
        buffer += chunk
        while (frame := parse_frame(buffer)) is not None:
            frames.append(frame)
            if frame[0] == 0x9:
                raw.send(client_frame(0xA, frame[1]))
        await asyncio.sleep(READ_EVERY_S)
    assert time.monotonic() - started > 2 * PING_S  # slow enough to have been judged
    snapshot = json.loads(next(payload for opcode, payload in frames if opcode == 0x1))
    assert snapshot["kind"] == "snapshot" and snapshot["seq"] == 1
    assert all(opcode != 0x8 for opcode, _ in frames)  # no close frame

    # Still open: it answers a message.
    raw.send(client_frame(0x1, json.dumps({"kind": "ping", "ref": 1}).encode()))
    while True:
        opcode, payload = await raw.frame()
        assert opcode != 0x8, payload
        if opcode == 0x1:
            assert json.loads(payload) == {"kind": "pong", "ref": 1}
            break
    raw.writer.close()
