"""SSE streams starting from a large snapshot: one shared copy of its event
for the streams that start from the same version, fed to each connection as
it drains, deltas and pings behind it in order, and the bound, on a real
server with real sockets."""

from __future__ import annotations

import asyncio
import base64
import gc
import random
import socket
import tracemalloc
from typing import Any

import httpx
import msgpack

from syncd.http.feed import FEED_SLICE_BYTES
from syncd.http.handlers.events import SseSubscriber
from syncd.http.protocol import WRITE_HIGH_WATER
from tests.conftest import RunningServer
from tests.http.support import issue, op
from tests.ws.support import wait_for

DOC = "rg:big"
MAX_BODY = 8 * 1024 * 1024
CHUNK = 200_000
CHUNKS = 8
READERS = 8
WAIT_S = 10.0


class Stalled:
    """A raw SSE client that reads nothing until told: a small receive window,
    and a small send buffer on the server's side of its socket (on loopback
    the kernel would take megabytes off the server's hands)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.buffer = bytearray()
        self._scanned = 0
        """How far the buffer was searched for an event's end (no rescans)."""
        self.synced: list[tuple[int, dict[str, Any]]] = []
        """``synced`` events passed over by :meth:`events`: (data events before it, its data)."""

    @classmethod
    async def open(cls, server: RunningServer, headers: dict[str, str]) -> Stalled:
        before = set(server.app.server_ctx.connections)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
        reader, writer = await asyncio.open_connection(sock=sock, limit=1024)
        await wait_for(lambda: set(server.app.server_ctx.connections) - before)
        (connection,) = set(server.app.server_ctx.connections) - before
        connection._transport.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_SNDBUF, 4096
        )
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(
            f"GET /v1/namespaces/app/crdts/{DOC}/events HTTP/1.1\r\nHost: t\r\n{head}\r\n".encode()
        )
        return cls(reader, writer)

    async def _more(self) -> bool:
        chunk = await asyncio.wait_for(self.reader.read(1 << 16), WAIT_S)
        self.buffer += chunk
        return bool(chunk)

    async def head(self) -> int:
        while b"\r\n\r\n" not in self.buffer:
            assert await self._more(), "closed before the head"
        end = self.buffer.index(b"\r\n\r\n")
        head = bytes(self.buffer[:end])
        del self.buffer[: end + 4]
        return int(head.split(b" ")[1])

    async def block(self) -> bytes | None:
        """The next event or comment, whole; None at the end of the stream."""
        while (end := self.buffer.find(b"\n\n", self._scanned)) < 0:
            self._scanned = max(0, len(self.buffer) - 1)
            try:
                if not await self._more():
                    return None
            except ConnectionResetError:
                return None
        block = bytes(self.buffer[:end])
        del self.buffer[: end + 2]
        self._scanned = 0
        return block

    async def events(self, count: int) -> list[dict[str, Any]]:
        """The next ``count`` data events (comments and ``synced`` events, kept
        in ``synced``, passed over; each whole)."""
        out: list[dict[str, Any]] = []
        while len(out) < count:
            block = await self.block()
            assert block is not None, "the stream ended"
            if block.startswith(b":"):
                assert block == b": ping"
                continue
            if block.startswith(b"event: synced\ndata: "):
                self.synced.append((len(out), msgpack.unpackb(base64.b64decode(block[20:]))))
                continue
            assert block.startswith(b"data: ") and b"\n" not in block
            out.append(msgpack.unpackb(base64.b64decode(block[6:], validate=True)))
        return out

    def close(self) -> None:
        self.writer.close()


async def _seed(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    rng = random.Random(35)
    length = 0
    for _ in range(CHUNKS):
        text = "".join(rng.choice("abcdefgh ") for _ in range(CHUNK))
        body = {"op": "insert", "index": rng.randint(0, length), "text": text}
        r = await op(client, headers, DOC, body)
        assert r.status_code == 200, r.text
        length += CHUNK


def _subscribers(server: RunningServer) -> list[SseSubscriber]:
    subs = [s for s in server.app.hub.subscribers("app", DOC) if isinstance(s, SseSubscriber)]
    return subs


def _on_hand(subscriber: SseSubscriber) -> bool:
    return subscriber._feed is not None


async def test_slow_readers_hold_one_snapshot_and_deltas_and_pings_follow_it(
    make_server: Any,
) -> None:
    server = await make_server(max_body_bytes=MAX_BODY, sse_ping_s=0.05)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        headers = await issue(client)
        await _seed(client, headers)
        expected = server.app.engine.snapshot_delta("app", DOC)
        size = len(base64.b64encode(msgpack.packb(expected)))
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            readers = [await Stalled.open(server, headers) for _ in range(READERS)]
            await wait_for(
                lambda: (
                    len(_subscribers(server)) == READERS
                    and all(_on_hand(s) for s in _subscribers(server))
                )
            )
            grown = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
        assert grown < 2 * size, grown  # one copy for all, not one each
        # Deltas and pings that come meanwhile wait behind the first event.
        for i in range(20):
            r = await op(client, headers, DOC, {"op": "insert", "index": i, "text": f"<{i}>"})
            assert r.status_code == 200
        await asyncio.sleep(0.3)  # several pings' worth
        for reader in readers:
            assert await reader.head() == 200
            events = await reader.events(21)
            assert events[0] == expected
            assert [(e["kind"], e["seq"]) for e in events[1:]] == [
                ("op", expected["seq"] + i + 1) for i in range(20)
            ]
            # The start (the snapshot) ends with synced, before the deltas behind it.
            ((before, synced),) = reader.synced
            assert (before, synced["kind"], synced["seq"]) == (1, "synced", expected["seq"])
            reader.close()


BOUND = WRITE_HIGH_WATER + FEED_SLICE_BYTES
"""What a stream may have waiting behind its snapshot: at least what the
transport holds once the feed is out (its mark and a slice), or the first
delta after the snapshot would end it."""
VALUE = "v" * 3000


async def test_past_the_bound_behind_the_snapshot_the_stream_resyncs(make_server: Any) -> None:
    server = await make_server(max_body_bytes=MAX_BODY, subscriber_buffer_bytes=BOUND)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        headers = await issue(client)
        await _seed(client, headers)
        reader = await Stalled.open(server, headers)
        await wait_for(lambda: len(_subscribers(server)) == 1)
        (subscriber,) = _subscribers(server)
        await wait_for(lambda: _on_hand(subscriber))
        feed = subscriber._feed
        assert feed is not None
        held = feed.own_bytes
        sent = 0
        for sent in range(1, 1000):
            r = await op(client, headers, DOC, {"op": "insert", "index": 0, "text": VALUE})
            assert r.status_code == 200
            await wait_for(lambda: feed.own_bytes > held or subscriber._lagging)  # noqa: B023
            if subscriber._lagging:
                break  # skipped: past the bound
            # Taken, behind the snapshot: what waited before it was within the bound.
            assert held <= BOUND, sent
            held = feed.own_bytes
        else:
            raise AssertionError("the bound was never reached")
        assert held > BOUND
        # Behind, not cut: later deltas are skipped too, the stream stays open.
        r = await op(client, headers, DOC, {"op": "insert", "index": 0, "text": VALUE})
        assert r.status_code == 200
        await asyncio.sleep(0.05)  # its fan-out's turn
        assert feed.own_bytes == held and subscriber._feed is feed
        assert not subscriber._closed
        last = r.json()["seq"]
        # Once read: the snapshot, the deltas that fit, then a fresh snapshot.
        assert await reader.head() == 200
        events = await reader.events(1)
        while events[-1]["seq"] < last:
            events += await reader.events(1)
        kinds = [e["kind"] for e in events]
        assert kinds == ["snapshot"] + ["op"] * (len(events) - 2) + ["snapshot"], kinds
        assert 0 < len(events) - 2 < sent
        assert events[-1]["seq"] == last
        reader.close()
