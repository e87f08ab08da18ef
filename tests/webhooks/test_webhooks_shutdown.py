"""Webhooks of a real ``syncd`` process: SIGTERM with events queued
(docs/webhooks.md#delivery: they get SERVICE_WEBHOOK_DRAIN_S to go out), a
receiver answering an endless body, and the signature recomputed from the
documentation's recipe alone."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from typing import Any

import httpx

from tests.http.support import issue, op

SECRET = "drain-secret"


class SlowReceiver:
    """Reads each request whole, waits ``delay``, answers 200 with ``body_bytes`` of body."""

    def __init__(self, delay: float, body_bytes: int = 0) -> None:
        self.delay = delay
        self.body_bytes = body_bytes
        self.bodies: list[bytes] = []
        self.signatures: list[str | None] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> SlowReceiver:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            headers = {}
            for line in head.decode("latin-1").split("\r\n")[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers["content-length"]))
            await asyncio.sleep(self.delay)
            self.bodies.append(body)
            self.signatures.append(headers.get("x-service-signature"))
            writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {self.body_bytes}\r\n\r\n".encode())
            sent = 0
            while sent < self.body_bytes:
                chunk = b"x" * min(65536, self.body_bytes - sent)
                writer.write(chunk)
                await writer.drain()
                sent += len(chunk)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


def valid(secret: bytes, body: bytes, header: str | None) -> bool:
    # docs/webhooks.md#signing, as written there.
    expected = hmac.new(secret, body, hashlib.sha256).hexdigest()
    return header is not None and hmac.compare_digest(expected, header)


async def test_sigterm_delivers_the_queued_events_within_the_drain(spawn_server: Any) -> None:
    receiver = await SlowReceiver(delay=0.1).start()
    try:
        server = spawn_server(
            {
                "SERVICE_WEBHOOK_URL": receiver.url,
                "SERVICE_WEBHOOK_SECRET": SECRET,
                "SERVICE_WEBHOOK_DRAIN_S": "5",
            }
        )
        async with httpx.AsyncClient(base_url=server.url) as client:
            h = await issue(client)
            for _ in range(40):
                r = await op(client, h, "gc:n", {"op": "increment", "amount": 1})
                assert r.status_code == 200
        # 4 workers at 0.1 s each: 40 events take about 1 s, well inside the drain.
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        code = await loop.run_in_executor(None, server.terminate)
        took = time.monotonic() - started
        assert code == 0, server.log()
        assert took < 5 + 3, took
        seqs = sorted(json.loads(b)["seq"] for b in receiver.bodies)
        assert seqs == list(range(1, 41)), (seqs, server.log())
        assert all(
            valid(SECRET.encode(), b, s)
            for b, s in zip(receiver.bodies, receiver.signatures, strict=True)
        )
    finally:
        await receiver.close()


async def test_sigterm_with_a_hung_receiver_stops_after_the_drain(spawn_server: Any) -> None:
    receiver = await SlowReceiver(delay=3600).start()
    try:
        server = spawn_server({"SERVICE_WEBHOOK_URL": receiver.url, "SERVICE_WEBHOOK_DRAIN_S": "1"})
        async with httpx.AsyncClient(base_url=server.url) as client:
            h = await issue(client)
            for _ in range(10):
                r = await op(client, h, "gc:n", {"op": "increment", "amount": 1})
                assert r.status_code == 200
        await asyncio.sleep(0.2)
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        code = await loop.run_in_executor(None, server.terminate)
        took = time.monotonic() - started
        assert code == 0, server.log()
        assert took < 1 + 3, took
        assert "webhooks: 10 events not delivered at shutdown" in server.log(), server.log()
    finally:
        await receiver.close()


async def test_an_endless_answer_body_does_not_hold_a_worker(spawn_server: Any) -> None:
    # 200 with a 1 GiB body: the status is the answer; the body is never read.
    receiver = await SlowReceiver(delay=0, body_bytes=1 << 30).start()
    try:
        server = spawn_server({"SERVICE_WEBHOOK_URL": receiver.url})
        async with httpx.AsyncClient(base_url=server.url) as client:
            h = await issue(client)
            for _ in range(8):
                r = await op(client, h, "gc:n", {"op": "increment", "amount": 1})
                assert r.status_code == 200
            async with asyncio.timeout(10):
                while len(receiver.bodies) < 8:
                    await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            text = (await client.get("/metrics")).text
        ok = [ln for ln in text.splitlines() if ln.startswith("service_webhook_deliveries_total{")]
        assert any('result="ok"' in ln and ln.endswith(" 8.0") for ln in ok), ok
    finally:
        await receiver.close()
