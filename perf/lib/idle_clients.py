"""Idle connections to syncd, one process's share: native WebSocket, Yjs, SSE.

Run as ``python -m perf.lib.idle_clients CONFIG_JSON`` by
:mod:`perf.studies.idle_connections`. The process opens ``count``
connections of one kind, numbered from ``first``, each made *live* the way a
real client's is:

- ``ws``: the native WebSocket upgrade, then ``subscribe`` to ``gc:idle-K``;
  live once the snapshot arrives;
- ``yjs``: the y-websocket upgrade to room ``idle-K`` (the document
  ``yd:idle-K``), our sync step 1, and step 2 answered to the server's; live
  once the server's step 2 arrives (synced, as a provider is);
- ``sse``: ``GET .../crdts/gc:idle-K/events``; live once the first event
  (the snapshot) arrives.

``K`` is the connection's number modulo ``crdts``, so the CRDTs' own memory
is spread over many connections and the figure is the connection's. Once
every connection is live the process prints one JSON line
(``{"opened": N}``) and keeps them open, answering the server's keepalive
pings as a browser does (a WebSocket that stays silent is closed after twice
``SERVICE_WS_PING_S``), until its standard input closes.

Ports: a TCP connection is unique by (source address, source port, server
address, server port), and Linux has ~28,000 ephemeral ports, so one
source address reaches one server port at most that many times. Connection
``i`` (numbered across every process) binds source address
``127.0.0.{2 + i // PER_SOURCE}`` with ``IP_BIND_ADDRESS_NO_PORT``, so the
port is picked at connect time, unique per 4-tuple (the TIME_WAIT sockets
of an earlier run against another server port are no obstacle).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import resource
import socket
import sys
from typing import Any, Final, cast

import msgpack
import uvloop

KINDS: Final = ("ws", "yjs", "sse")
CONNECT_BATCH: Final = 200
"""Connections opened at once: well under the server's listen backlog."""
PER_SOURCE: Final = 20_000
"""Connections per source address: under the ~28,000 ephemeral ports."""
IP_BIND_ADDRESS_NO_PORT: Final = 24
"""Linux's option (linux/in.h): bind the address now, pick the port at connect."""
READY_TIMEOUT_S: Final = 60.0
"""One batch must be live within this, or the run fails loudly."""

YJS_STEP1: Final = b"\x00\x00\x01\x00"
"""y-protocols sync step 1 with an empty state vector: we have nothing."""
YJS_EMPTY_STEP2: Final = b"\x00\x01\x02\x00\x00"
"""Sync step 2 with an empty update: the answer to the server's step 1."""


def source_address(i: int) -> str:
    return f"127.0.0.{2 + i // PER_SOURCE}"


def client_frame(payload: bytes, opcode: int = 0x2) -> bytes:
    """A masked client frame with an all-zero key (the payload stays as is)."""
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | opcode, 0x80 | n))
    elif n < 65536:
        head = bytes((0x80 | opcode, 0x80 | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 0x80 | 127)) + n.to_bytes(8, "big")
    return head + b"\0\0\0\0" + payload


class Idle(asyncio.Protocol):
    """One connection: the request, its answer, then live and quiet."""

    __slots__ = ("buf", "crdt_id", "kind", "path", "ready", "transport", "upgraded")

    def __init__(self, kind: str, path: str, crdt_id: str) -> None:
        self.kind = kind
        self.path = path
        self.crdt_id = crdt_id
        self.transport: asyncio.Transport | None = None
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.buf = b""
        self.upgraded = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it.
        self.transport = transport = cast(asyncio.Transport, transport)
        head = b"GET " + self.path.encode() + b" HTTP/1.1\r\nHost: b\r\n"
        if self.kind != "sse":
            key = base64.b64encode(os.urandom(16))
            head += (
                b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + b"\r\n"
            )
        transport.write(head + b"\r\n")

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        if not self.upgraded:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.buf = buf
                return
            expected = b"HTTP/1.1 200" if self.kind == "sse" else b"HTTP/1.1 101"
            if not buf.startswith(expected):
                self._fail(buf[:200].decode("latin-1"))
                return
            self.upgraded = True
            buf = buf[end + 4 :]
            if self.kind == "ws":
                self._send(msgpack.packb({"kind": "subscribe", "id": self.crdt_id}))
            elif self.kind == "yjs":
                self._send(YJS_STEP1)
        if self.kind == "sse":
            self.buf = b""
            if b"data:" in buf and not self.ready.done():
                self.ready.set_result(None)  # the snapshot; the pings after it say nothing
            return
        self.buf = self._frames(buf)

    def _frames(self, buf: bytes) -> bytes:
        pos, n = 0, len(buf)
        while n - pos >= 2:
            length = buf[pos + 1] & 0x7F
            head = 2
            if length == 126:
                if n - pos < 4:
                    break
                length = (buf[pos + 2] << 8) | buf[pos + 3]
                head = 4
            elif length == 127:
                if n - pos < 10:
                    break
                length = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                head = 10
            end = pos + head + length
            if end > n:
                break
            self._frame(buf[pos] & 0x0F, buf[pos + head : end])
            pos = end
        return buf[pos:] if pos < n else b""

    def _frame(self, opcode: int, payload: bytes) -> None:
        if opcode == 0x9:
            self._send(payload, 0xA)  # the keepalive ping: pong, as a browser does
        elif opcode == 0x8:
            self._fail(f"closed by the server: {payload[2:].decode('utf-8', 'replace')}")
        elif self.kind == "ws":
            if not self.ready.done():
                self.ready.set_result(None)  # the snapshot
        elif payload[:2] == b"\x00\x00":
            self._send(YJS_EMPTY_STEP2)  # the server's step 1
        elif payload[:2] == b"\x00\x01" and not self.ready.done():
            self.ready.set_result(None)  # the server's step 2: synced

    def _send(self, payload: bytes, opcode: int = 0x2) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(client_frame(payload, opcode))

    def _fail(self, why: str) -> None:
        if not self.ready.done():
            self.ready.set_exception(RuntimeError(why))

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(f"connection lost: {exc}")


def target(kind: str, ns: str, token: str, k: int) -> tuple[str, str]:
    """(request path, CRDT id) of a connection to CRDT number ``k``."""
    if kind == "ws":
        return f"/v1/namespaces/{ns}/ws?token={token}", f"gc:idle-{k}"
    if kind == "yjs":
        return f"/v1/namespaces/{ns}/yjs/idle-{k}?token={token}", f"yd:idle-{k}"
    crdt_id = f"gc:idle-{k}"
    return f"/v1/namespaces/{ns}/crdts/{crdt_id}/events?token={token}", crdt_id


async def connect(client: Idle, source: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        sock.setblocking(False)
        sock.bind((source, 0))
        await loop.sock_connect(sock, ("127.0.0.1", port))
    except BaseException:
        sock.close()
        raise
    await loop.create_connection(lambda: client, sock=sock)


async def open_all(config: dict[str, Any]) -> list[Idle]:
    kind, port, count, first = config["kind"], config["port"], config["count"], config["first"]
    ns, token, crdts = config["ns"], config["token"], config["crdts"]
    clients: list[Idle] = []
    for start in range(first, first + count, CONNECT_BATCH):
        batch = []
        for i in range(start, min(first + count, start + CONNECT_BATCH)):
            path, crdt_id = target(kind, ns, token, i % crdts)
            batch.append((Idle(kind, path, crdt_id), source_address(i)))
        await asyncio.gather(*(connect(client, source, port) for client, source in batch))
        await asyncio.wait_for(
            asyncio.gather(*(client.ready for client, _ in batch)), READY_TIMEOUT_S
        )
        clients += (client for client, _ in batch)
    return clients


async def run(config: dict[str, Any]) -> None:
    clients = await open_all(config)
    print(json.dumps({"opened": len(clients)}), flush=True)
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.add_reader(sys.stdin.fileno(), lambda: done.done() or done.set_result(None))
    await done  # stdin readable: closed (nothing is written to it)
    lost = sum(1 for c in clients if c.transport is None or c.transport.is_closing())
    print(json.dumps({"lost": lost}), flush=True)


def main() -> None:
    config = json.loads(sys.argv[1])
    needed = config["count"] + 100
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        # Raising the hard limit needs root (CAP_SYS_RESOURCE); the study checks.
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(needed, soft), max(needed, hard)))
    uvloop.run(run(config))


if __name__ == "__main__":
    main()
