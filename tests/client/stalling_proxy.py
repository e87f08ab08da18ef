"""A TCP proxy for client tests that can stop the client's bytes from
reaching the server for a while (a slow or stalled link, one way)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

from tests.conftest import RunningServer

PROXY_BUFFER_BYTES = 4096
"""The proxy's socket buffer and read size: small, so a stalled proxy soon
stops taking the client's bytes."""


class StallingProxy:
    """Forwards TCP both ways; :meth:`stall` stops reading the client's side
    (the server's answers still flow), :meth:`resume` starts again."""

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0
        self.connections = 0
        """Connections accepted so far."""

    async def start(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, PROXY_BUFFER_BYTES)
        listener.bind(("127.0.0.1", 0))
        self._server = await asyncio.start_server(
            self._accept, sock=listener, limit=PROXY_BUFFER_BYTES
        )
        self.port = listener.getsockname()[1]

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self._target_port)
        for task in (
            asyncio.create_task(relay(client_r, server_w, self._flowing)),
            asyncio.create_task(relay(server_r, client_w)),
        ):
            self._tasks.add(task)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@contextlib.asynccontextmanager
async def proxy_to(server: RunningServer) -> AsyncIterator[StallingProxy]:
    proxy = StallingProxy(server.port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()


async def relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    gate: asyncio.Event | None = None,
    chunk: int = PROXY_BUFFER_BYTES,
) -> None:
    """Copy ``reader`` to ``writer`` until either ends, ``chunk`` bytes a read,
    while ``gate`` (when given) is set; then close ``writer``."""
    try:
        while True:
            if gate is not None:
                await gate.wait()
            data = await reader.read(chunk)
            if not data:
                break
            if gate is not None:  # read while waiting, before a stall: held
                await gate.wait()
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()
