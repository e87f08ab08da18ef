"""A connection attempt slower than a reader's read timeout survives the
cancelled read.

A reader polling with a short timeout (``wait_for(anext(stream), 0.02)``)
cancelled the attempt itself when connecting (connect, request, the answer's
head) took longer than its timeout, and the next read started a new attempt
at once: the backoff only covers the wait *between* attempts. A server (or a
machine) slower than the reader's timeout got an attempt per read and was
never connected to. The peers here answer only after :data:`ANSWER_DELAY_S`:
a proxy to the real server that holds each new connection that long, and one
that closes it after that long without an answer."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from syncd.client import AsyncClient
from syncd.client.stream import EventStream, Subscription
from tests.client.conftest import NS, make_token
from tests.client.stalling_proxy import relay
from tests.conftest import RunningServer

READ_TIMEOUT_S = 0.02
ANSWER_DELAY_S = 0.1
"""Five of the reader's timeouts: every attempt outlives several reads."""

MAX_READS = 250
"""Reads (of 20 ms each, 5 s) before giving up on the first delta: a
hundredth of that suffices once the attempt survives; before, no number did."""

RUN_S = 1.0
MAX_ATTEMPTS = 8
"""As in test_client_stream_backoff_cancelled_reader: attempts of 100 ms
followed by waits of 25-50, 50-100, 100-200, 200-400 ms make at most five in
a second, some slack for a slow machine; cancelled reads made one per read."""

VIAS = ["ws", "sse"]


class SlowProxy:
    """Forwards TCP to ``target_port`` only ``ANSWER_DELAY_S`` after accepting
    a connection (``target_port`` None: closes it then, never answering)."""

    def __init__(self, target_port: int | None) -> None:
        self._target_port = target_port
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0
        self.connections = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        accepting = asyncio.current_task()
        assert accepting is not None
        self._tasks.add(accepting)
        try:
            await asyncio.sleep(ANSWER_DELAY_S)
        except asyncio.CancelledError:  # the proxy closing: the client is gone
            client_w.close()
            return
        if self._target_port is None:
            client_w.close()
            return
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self._target_port)
        for task in (
            asyncio.create_task(relay(client_r, server_w, chunk=65536)),
            asyncio.create_task(relay(server_r, client_w, chunk=65536)),
        ):
            self._tasks.add(task)

    async def close(self) -> None:
        current = asyncio.current_task()
        tasks = [task for task in self._tasks if task is not current and not task.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@contextlib.asynccontextmanager
async def slow_proxy(target_port: int | None) -> AsyncIterator[SlowProxy]:
    proxy = SlowProxy(target_port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()


def open_stream(client: AsyncClient, via: str, crdt_id: str) -> Subscription | EventStream:
    return client.subscribe([crdt_id]) if via == "ws" else client.events(crdt_id)


@pytest.mark.parametrize("via", VIAS)
async def test_a_polling_reader_connects_to_a_server_slower_than_its_timeout(
    server: RunningServer, via: str
) -> None:
    crdt_id = f"gc:slow-{via}"
    async with (
        AsyncClient(server.url, make_token(2), NS) as writer,
        slow_proxy(server.port) as proxy,
        AsyncClient(f"http://127.0.0.1:{proxy.port}", make_token(3), NS) as client,
    ):
        await writer.gcounter_increment(crdt_id, 5)
        async with open_stream(client, via, crdt_id) as stream:
            delta = None
            for _ in range(MAX_READS):
                with contextlib.suppress(TimeoutError):
                    delta = await asyncio.wait_for(anext(stream), READ_TIMEOUT_S)
                    break
            assert delta is not None, f"no delta in {MAX_READS} reads, {proxy.connections} attempts"
            assert delta["kind"] == "snapshot"
            assert delta["id"] == crdt_id
            assert proxy.connections == 1
            assert stream.connects == 1


@pytest.mark.parametrize("via", VIAS)
async def test_a_slow_refusal_is_backed_off_for_a_polling_reader(via: str) -> None:
    async with (
        slow_proxy(None) as proxy,
        AsyncClient(f"http://127.0.0.1:{proxy.port}", make_token(2), NS) as client,
        open_stream(client, via, "gc:x") as stream,
    ):
        loop = asyncio.get_running_loop()
        end = loop.time() + RUN_S
        while loop.time() < end:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(anext(stream), READ_TIMEOUT_S)
    assert 2 <= proxy.connections <= MAX_ATTEMPTS, proxy.connections
