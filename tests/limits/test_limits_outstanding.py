"""Outstanding bytes per connection: a peer that sends requests but does not
read the answers holds at most about one answer plus the write bound of the
server's memory, over HTTP pipelining and over WebSocket alike.

Both were unbounded once: a pipeline of small GETs of a large CRDT (or a
WebSocket message run of subscribes to it, each answered with a snapshot) was
answered in full into the transport's buffer, whether or not the peer read.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
from typing import Any

import httpx
import msgpack

from syncd.http.protocol import WRITE_HIGH_WATER
from tests.conftest import ADMIN, RunningServer
from tests.http.support import ADMIN_HEADERS
from tests.ws.support import client_frame, parse_frame

ELEMENT_BYTES = 60_000
ELEMENTS = 15
PIPELINE = 40
"""Requests sent at once; unbounded, their answers would be PIPELINE times a
state of ELEMENTS * ELEMENT_BYTES (36 MB)."""
SMALL_RCVBUF = 64 * 1024
"""The client's receive buffer, kept small so the kernel absorbs little."""


async def big_state(server: RunningServer, crdt_id: str) -> int:
    """Fill ``crdt_id`` (an orset) with a state of about 0.9 MB; returns its JSON size."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        ops = [{"op": "add", "element": f"{i:02d}" + "x" * ELEMENT_BYTES} for i in range(ELEMENTS)]
        r = await client.post(
            f"/v1/namespaces/app/crdts/{crdt_id}/ops", json=ops, headers=ADMIN_HEADERS
        )
        assert r.status_code == 200, r.text
        r = await client.get(f"/v1/namespaces/app/crdts/{crdt_id}", headers=ADMIN_HEADERS)
        return len(r.content)


class Peer:
    """A raw socket with a small receive buffer that reads only when told to
    (a StreamReader would read everything into its own buffer at once)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()

    @classmethod
    async def connect(cls, port: int) -> Peer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_RCVBUF)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        return cls(sock)

    async def send(self, data: bytes) -> None:
        await asyncio.get_running_loop().sock_sendall(self.sock, data)

    async def fill(self) -> None:
        chunk = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(self.sock, 2**20), 10)
        assert chunk, "closed"
        self.buffer += chunk

    async def read_until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            await self.fill()
        end = self.buffer.index(marker) + len(marker)
        data = bytes(self.buffer[:end])
        del self.buffer[:end]
        return data

    async def read_exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            await self.fill()
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        return data

    def close(self) -> None:
        self.sock.close()


async def settled(measure: Any) -> int:
    """The value of ``measure()`` once it is above zero and stops changing
    (the server has answered what it will and is waiting for the peer)."""
    samples: list[int] = []
    for _ in range(100):
        await asyncio.sleep(0.05)
        samples.append(int(measure()))
        if samples[-1] > 0 and samples[-3:] == [samples[-1]] * 3:
            break
    return samples[-1]


async def test_http_pipeline_of_large_answers_is_not_answered_past_the_write_bound(
    server: RunningServer,
) -> None:
    state_bytes = await big_state(server, "or:big")
    peer = await Peer.connect(server.port)
    request = (
        b"GET /v1/namespaces/app/crdts/or:big HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer "
        + ADMIN.encode()
        + b"\r\n\r\n"
    )
    await peer.send(request * PIPELINE)

    def buffered() -> int:
        return sum(
            c._transport.get_write_buffer_size()
            for c in server.server.ctx.connections
            if c._transport is not None
        )

    held = await settled(buffered)
    assert held <= WRITE_HIGH_WATER + 2 * state_bytes, (held, state_bytes)
    # A peer that does read gets every answer, in order.
    for _ in range(PIPELINE):
        head = await peer.read_until(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        assert length == state_bytes
        await peer.read_exactly(length)
    peer.close()


async def test_websocket_subscribe_run_is_not_answered_past_the_write_bound(
    make_server: Any,
) -> None:
    bound = 256 * 1024
    server = await make_server(subscriber_buffer_bytes=bound)
    state_bytes = await big_state(server, "or:big")
    peer = await Peer.connect(server.port)
    key = base64.b64encode(os.urandom(16))
    await peer.send(
        b"GET /v1/namespaces/app/ws?token=" + ADMIN.encode() + b" HTTP/1.1\r\nHost: t\r\n"
        b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: " + key + b"\r\n\r\n"
    )
    assert (await peer.read_until(b"\r\n\r\n")).startswith(b"HTTP/1.1 101 ")
    subscribe = client_frame(0x2, msgpack.packb({"kind": "subscribe", "id": "or:big"}))
    await peer.send(subscribe * PIPELINE + client_frame(0x2, msgpack.packb({"kind": "ping"})))

    def buffered() -> int:
        return sum(s.transport.get_write_buffer_size() for s in server.server.ctx.other_connections)

    held = await settled(buffered)
    assert held <= bound + 2 * state_bytes, (held, state_bytes)
    # Reading drains it: every snapshot (each start ending with synced) comes, then the pong.
    messages: list[dict[str, Any]] = []
    while len(messages) < 2 * PIPELINE + 1:
        frame = parse_frame(peer.buffer)
        if frame is None:
            await peer.fill()
            continue
        messages.append(msgpack.unpackb(frame[1]))
    assert [m["kind"] for m in messages] == ["snapshot", "synced"] * PIPELINE + ["pong"]
    assert len(json.dumps(messages[0]["state"])) > ELEMENTS * ELEMENT_BYTES
    peer.close()
