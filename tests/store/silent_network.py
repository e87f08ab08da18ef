"""A TCP relay between a node and PostgreSQL that can go silent: bytes are
held, not dropped, and no connection is closed (a network partition, or a
server frozen in its I/O), as opposed to a server that stops, which ends its
connections at once."""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit


class SilentRelay:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        self._target = (parts.hostname, parts.port)
        self._url = url
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.url = ""
        """``url`` through the relay (set by start)."""

    async def start(self) -> SilentRelay:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        host, target_port = self._target
        self.url = self._url.replace(f"{host}:{target_port}", f"127.0.0.1:{port}", 1)
        return self

    def silence(self) -> None:
        self._flowing.clear()

    def restore(self) -> None:
        self._flowing.set()

    async def close(self) -> None:
        self.restore()
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            self._tasks.discard(task)
            return
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self._tasks.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
