"""The SSE stream, read by a plain client that parses the wire format itself."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import struct
import time
from typing import Any

import httpx
import msgpack

from syncd.http.feed import FEED_SLICE_BYTES
from syncd.http.protocol import WRITE_HIGH_WATER
from tests.conftest import RunningServer
from tests.http.support import issue, op

SYNCED_PREFIX = "event: synced\ndata: "


class SseReader:
    """A raw-socket SSE client: request head, then `data:` events and `:` comments.
    ``event: synced`` events (the end of the start) are kept in ``synced`` and
    skipped by :meth:`event` and :meth:`end_event`; :meth:`named` returns them."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.comments: list[str] = []
        self.synced: list[dict[str, Any]] = []

    @classmethod
    async def open(
        cls, port: int, path: str, headers: dict[str, str]
    ) -> tuple[SseReader, int, dict[str, str]]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n{head}\r\n".encode()
        )
        raw = await reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {ln.split(":", 1)[0].lower(): ln.split(":", 1)[1].strip() for ln in lines[1:] if ln}
        return cls(reader, writer), status, hdrs

    async def event(self, timeout: float = 5.0) -> dict[str, Any]:
        while True:
            name, delta = await self.named(timeout)
            if name == "message":
                return delta

    async def named(self, timeout: float = 5.0) -> tuple[str, dict[str, Any]]:
        """The next event, a delta (``message``) or ``synced``, and its data."""
        while True:
            block = await asyncio.wait_for(self.reader.readuntil(b"\n\n"), timeout)
            text = block.decode("ascii")
            if text.startswith(":"):
                self.comments.append(text)
                continue
            if text.startswith(SYNCED_PREFIX):
                data = text[len(SYNCED_PREFIX) :]
                assert data.endswith("\n\n") and data.count("\n") == 2, text
                synced: dict[str, Any] = msgpack.unpackb(
                    base64.b64decode(data[:-2], validate=True), raw=False
                )
                self.synced.append(synced)
                return "synced", synced
            assert text.startswith("data: ") and text.endswith("\n\n") and text.count("\n") == 2, (
                text
            )
            payload = base64.b64decode(text[6:-2], validate=True)
            delta: dict[str, Any] = msgpack.unpackb(payload, raw=False)
            return "message", delta

    async def end_event(self, timeout: float = 5.0) -> dict[str, Any]:
        """The stream's last event, ``event: end``: its data (the error body);
        no delta may come before it."""
        while True:
            block = await asyncio.wait_for(self.reader.readuntil(b"\n\n"), timeout)
            text = block.decode("utf-8")
            if text.startswith(":") or text.startswith(SYNCED_PREFIX):
                continue
            name, data, blank = text.split("\n", 2)
            assert name == "event: end" and data.startswith("data: ") and blank == "\n", text
            body: dict[str, Any] = json.loads(data[6:])
            return body

    async def remainder(self, timeout: float = 5.0) -> bytes:
        """Whatever comes until the server closes the connection."""
        return await asyncio.wait_for(self.reader.read(), timeout)

    def close(self) -> None:
        self.writer.close()


async def test_snapshot_then_consecutive_deltas_and_resume(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        path = "/v1/namespaces/app/crdts/gc:live/events"
        sse, status, headers = await SseReader.open(server.port, path, h)
        assert status == 200 and headers["content-type"] == "text/event-stream"
        first = await sse.event()
        assert first["kind"] == "snapshot" and first["seq"] == 0 and first["state"] is None
        assert first["type"] == "gcounter"
        for _ in range(3):
            await op(client, h, "gc:live", {"op": "increment"})
        deltas = [await sse.event() for _ in range(3)]
        assert [d["seq"] for d in deltas] == [1, 2, 3]
        assert all(
            d["kind"] == "op" and d["client_id"] == 7 and d["type"] == "gcounter" for d in deltas
        )
        epoch = deltas[0]["epoch"]
        sse.close()
        for _ in range(2):
            await op(client, h, "gc:live", {"op": "increment"})
        sse2, _, _ = await SseReader.open(server.port, f"{path}?since=3&epoch={epoch}", h)
        replay = [await sse2.event() for _ in range(2)]
        assert [(d["kind"], d["seq"]) for d in replay] == [("op", 4), ("op", 5)]
        sse2.close()
        # a stale epoch gets a snapshot
        sse3, _, _ = await SseReader.open(server.port, f"{path}?since=3&epoch=deadbeef", h)
        snap = await sse3.event()
        assert snap["kind"] == "snapshot" and snap["seq"] == 5
        sse3.close()


async def test_keep_alive_ping(make_server: Any) -> None:
    srv = await make_server(sse_ping_s=0.1)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        h = await issue(client)
        sse, _, _ = await SseReader.open(srv.port, "/v1/namespaces/app/crdts/gc:p/events", h)
        await sse.event()
        await asyncio.sleep(0.35)
        await op(client, h, "gc:p", {"op": "increment"})
        assert (await sse.event())["seq"] == 1
        assert sse.comments and sse.comments[0] == ": ping\n\n"


async def test_a_stream_ignores_what_its_client_sends_and_ends_at_its_eof(
    server: RunningServer,
) -> None:
    """Once streaming, the connection parses nothing (it let its parser go):
    a request sent on it is ignored, deltas still come, and the client's
    half-close ends the stream and unsubscribes it."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        sse, _, _ = await SseReader.open(server.port, "/v1/namespaces/app/crdts/gc:q/events", h)
        await sse.event()
        sse.writer.write(b"GET /health/live HTTP/1.1\r\nHost: t\r\n\r\n\x00garbage")
        await op(client, h, "gc:q", {"op": "increment"})
        assert (await sse.event())["seq"] == 1
        assert server.app.hub.subscribed("app", "gc:q")
        sse.writer.write_eof()
        assert await sse.remainder() == b""  # closed by the server, nothing else written
        for _ in range(100):
            if not server.app.hub.subscribed("app", "gc:q"):
                break
            await asyncio.sleep(0.01)
        assert not server.app.hub.subscribed("app", "gc:q")


async def test_sse_errors(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.get("/v1/namespaces/app/crdts/gc:p/events")
        assert r.status_code == 401
        h = await issue(client, read=["or:*"])
        r = await client.get("/v1/namespaces/app/crdts/gc:p/events", headers=h)
        assert r.status_code == 403
        r = await client.get(
            "/v1/namespaces/app/crdts/gc:p/events?since=x", headers=await issue(client)
        )
        assert r.status_code == 400
        r = await client.post("/v1/namespaces/app/crdts/gc:p/events", headers=h)
        assert r.status_code == 405


async def test_deleted_event(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client, admin=True)
        await op(client, h, "gc:d", {"op": "increment"})
        sse, _, _ = await SseReader.open(server.port, "/v1/namespaces/app/crdts/gc:d/events", h)
        assert (await sse.event())["seq"] == 1
        assert (await client.delete("/v1/namespaces/app/crdts/gc:d", headers=h)).status_code == 204
        assert await sse.event() == {"kind": "deleted", "ns": "app", "id": "gc:d"}


async def test_stalled_reader_resyncs_healthy_reader_keeps_receiving(make_server: Any) -> None:
    """A reader past the bound is not cut: it skips deltas, what the server
    holds for it stays bounded, and once it reads it gets a fresh snapshot."""
    bound = 4096
    srv = await make_server(subscriber_buffer_bytes=bound, rate_limit=100_000)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        h = await issue(client)
        path = "/v1/namespaces/app/crdts/or:big/events"
        # The stalled reader: tiny receive buffer, never reads after the head.
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", srv.port))
        auth = h["authorization"]
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\nAuthorization: {auth}\r\n\r\n".encode())
        healthy, _, _ = await SseReader.open(srv.port, path, h)
        assert (await healthy.event())["kind"] == "snapshot"
        # Big deltas, so the kernel's socket buffers fill and the server's own
        # buffer grows past its bound.
        big = "x" * 40000
        ops = 200
        for i in range(ops):
            r = await op(client, h, "or:big", {"op": "add", "element": f"{i}{big}"})
            assert r.status_code == 200
            assert (await healthy.event())["seq"] == i + 1
        # The stalled one is still there, and owes no more than the
        # connection's high-water mark, a slice of a snapshot, the bound and a delta.
        assert srv.app.hub.count == 2
        stalled = [c for c in srv.app.server_ctx.connections if c._stream is not None]
        owed = max(c._transport.get_write_buffer_size() for c in stalled)
        assert owed <= WRITE_HIGH_WATER + FEED_SLICE_BYTES + 1024, owed
        # Once it reads, it catches up through a fresh snapshot.
        sock.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 24)
        behind = SseReader(reader, writer)
        await reader.readuntil(b"\r\n\r\n")
        seen: list[tuple[str, int]] = []
        while not seen or seen[-1][1] < ops:
            delta = await behind.event(timeout=10)
            seen.append((delta["kind"], delta.get("seq", 0)))
        assert seen[-1] == ("snapshot", ops)
        assert len(seen) < ops
        behind.close()


TTL_MS = 1500
"""A token or rule lifetime that a test waits out: short, yet long enough to
subscribe and see a delta first on a loaded machine."""
EARLY_S = 0.02
"""How much earlier than its expiry a stream may seem to end: the test's
monotonic clock and the server's wall clock are read at different moments."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def test_the_stream_ends_with_an_end_event_when_the_token_expires(
    server: RunningServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        writer = await issue(client, client_id=8)
        started = time.monotonic()
        h = await issue(client, ttl_ms=TTL_MS)
        path = "/v1/namespaces/app/crdts/gc:x/events"
        sse, status, _ = await SseReader.open(server.port, path, h)
        assert status == 200 and (await sse.event())["kind"] == "snapshot"
        await op(client, writer, "gc:x", {"op": "increment"})
        assert (await sse.event())["seq"] == 1  # deltas flow until the expiry
        end = await sse.end_event()
        assert time.monotonic() - started >= TTL_MS / 1000 - EARLY_S
        assert end == {"error": "token_expired", "message": "token expired"}
        # Another token writes after the expiry: nothing reaches the stream,
        # which the server has closed.
        assert (await op(client, writer, "gc:x", {"op": "increment"})).status_code == 200
        assert await sse.remainder() == b""
        assert server.app.hub.count == 0


async def test_a_rule_expiry_ends_only_the_stream_it_granted(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        writer = await issue(client, client_id=8)
        ends = _now_ms() + TTL_MS
        rules = {"r": [{"p": "gc:short", "e": ends}, {"p": "gc:long"}]}
        h = await issue(client, rules=rules)
        short, _, _ = await SseReader.open(
            server.port, "/v1/namespaces/app/crdts/gc:short/events", h
        )
        long, _, _ = await SseReader.open(server.port, "/v1/namespaces/app/crdts/gc:long/events", h)
        assert (await short.event())["kind"] == "snapshot"
        assert (await long.event())["kind"] == "snapshot"
        end = await short.end_event()
        assert _now_ms() >= ends
        assert end["error"] == "forbidden" and "expired" in end["message"]
        for crdt_id in ("gc:short", "gc:long"):
            await op(client, writer, crdt_id, {"op": "increment"})
        assert await short.remainder() == b""
        delta = await long.event()
        assert (delta["id"], delta["seq"]) == ("gc:long", 1)
        # The token still reads gc:long; gc:short is refused from now on.
        r = await client.get("/v1/namespaces/app/crdts/gc:short/events", headers=h)
        assert r.status_code == 403
        long.close()


async def test_an_op_whose_client_resets_before_it_is_durable_still_reaches_subscribers(
    make_server: Any,
) -> None:
    """An op applied in memory and queued for the log is published and counted
    once durable, like any other, when its client resets the connection
    meanwhile: only the answer is not sent. (While the op path was a task,
    the reset cancelled it at its wait, and its delta never left.)"""
    srv = await make_server(fsync="batch")
    engine = srv.app.engine
    rounds = 10
    async with httpx.AsyncClient(base_url=srv.url) as client:
        h = await issue(client)
        await op(client, h, "gc:reset", {"op": "increment"})
        sse, _, _ = await SseReader.open(srv.port, "/v1/namespaces/app/crdts/gc:reset/events", h)
        assert (await sse.event())["kind"] == "snapshot"
        body = b'{"op":"increment"}'
        request = (
            "POST /v1/namespaces/app/crdts/gc:reset/ops HTTP/1.1\r\nHost: t\r\n"
            f"authorization: {h['authorization']}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        ).encode() + body
        for i in range(rounds):
            _, writer = await asyncio.open_connection("127.0.0.1", srv.port)
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.write(request)
            deadline = time.monotonic() + 5
            entry = engine.get("app", "gc:reset")
            while entry is None or entry.seq < i + 2:  # applied in memory: now reset
                assert time.monotonic() < deadline, "the op was never applied"
                await asyncio.sleep(0)
                entry = engine.get("app", "gc:reset")
            writer.transport.abort()  # SO_LINGER 0: an RST, not a FIN
        deltas = [await sse.event() for _ in range(rounds)]
        assert [d["seq"] for d in deltas] == list(range(2, rounds + 2))
        sse.close()
        metrics = (await client.get("/metrics")).text
        counted = (
            f'service_ops_total{{crdt_id="gc:reset",ns="app",op_type="increment"}} {rounds + 1}.0'
        )
        assert counted in metrics
