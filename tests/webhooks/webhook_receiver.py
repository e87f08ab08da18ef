"""A real webhook receiver for tests: an asyncio server on 127.0.0.1 speaking h11.

It checks the signature with its own HMAC code (not the dispatcher's), records
every request with its arrival time on the loop clock, and can be told to
answer an error status the first N times, to stall (read the request, never
answer), or to send a raw answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h11

from syncd.metrics import Metrics


@dataclass
class Received:
    at: float  # loop.time() when the whole request had arrived
    method: str
    target: str
    headers: list[tuple[str, str]]  # names lowercased, in order
    body: bytes
    signature_ok: bool | None  # None when the receiver has no secret

    def header(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k == name.lower()]
        assert len(values) <= 1, f"header {name} repeated"
        return values[0] if values else None

    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    def __init__(
        self,
        secret: str | None = None,
        *,
        fail_first: int = 0,
        fail_status: int = 500,
        stall: bool = False,
        raw_answer: bytes | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.secret = secret
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.stall = stall
        self.raw_answer = raw_answer
        self.ssl_context = ssl_context
        self.requests: list[Received] = []
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._changed = asyncio.Event()
        # Stalled handlers wait on this; cancelling a start_server handler task
        # instead makes Python 3.11's streams log a spurious error.
        self._closing = asyncio.Event()

    @property
    def url(self) -> str:
        return self.url_for("127.0.0.1")

    def url_for(self, host: str, path: str = "/hook") -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://{host}:{self.port}{path}"

    async def start(self) -> Receiver:
        self._server = await asyncio.start_server(
            self._handle, "127.0.0.1", 0, ssl=self.ssl_context
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def wait_for(self, n: int, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while len(self.requests) < n:
                self._changed.clear()
                await self._changed.wait()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._closing.set()
        for w in list(self._writers):
            w.transport.abort()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def _verify(self, body: bytes, headers: list[tuple[str, str]]) -> bool | None:
        if self.secret is None:
            return None
        given = [v for k, v in headers if k == "x-service-signature"]
        expected = hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
        return len(given) == 1 and hmac.compare_digest(given[0], expected)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        self.connections += 1
        try:
            await self._serve(reader, writer)
        except (ConnectionError, ssl.SSLError, h11.ProtocolError):
            pass
        finally:
            self._handlers.discard(task)
            self._writers.discard(writer)
            writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        request: h11.Request | None = None
        body = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                if not data:
                    return
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                break
        assert request is not None
        headers = [(bytes(k).decode().lower(), bytes(v).decode()) for k, v in request.headers]
        received = Received(
            at=asyncio.get_running_loop().time(),
            method=request.method.decode(),
            target=request.target.decode(),
            headers=headers,
            body=body,
            signature_ok=self._verify(body, headers),
        )
        self.requests.append(received)
        self._changed.set()
        if self.stall:
            await self._closing.wait()
            return
        if self.raw_answer is not None:
            writer.write(self.raw_answer)
            await writer.drain()
            await self._closing.wait()
            return
        if received.signature_ok is False:
            status = 401  # the seed's receiver behaviour for a wrong signature
        elif len(self.requests) <= self.fail_first:
            status = self.fail_status
        else:
            status = 200
        answer = b"ok"
        out = conn.send(
            h11.Response(
                status_code=status,
                headers=[("Content-Length", str(len(answer))), ("Connection", "close")],
            )
        )
        out += conn.send(h11.Data(data=answer)) or b""
        out += conn.send(h11.EndOfMessage()) or b""
        writer.write(out)
        await writer.drain()
        with contextlib.suppress(OSError):
            writer.close()
            await writer.wait_closed()


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    """A metric's current value; 0 when the series does not exist yet."""
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else float(value)


@dataclass(frozen=True)
class Certs:
    cert: Path  # self-signed, subjectAltName DNS:localhost only
    key: Path

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, self.key)
        return ctx

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert))
