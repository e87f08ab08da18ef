"""close() on a blocking stream while another thread reads it: the reader's
next() ends (StopIteration), never waits for ever. close() drains the queue
so the background thread can finish, and it could take the stream's end out
of it: a reader that called next() meanwhile then waited on an empty queue
that nothing would fill again. A race, so it is run many times (without the
fix a reader hung within the first few dozen)."""

from __future__ import annotations

import asyncio
import threading
import time

from syncd.client import Client
from syncd.client.aio import AsyncClient
from syncd.client.sync import BlockingStream
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

ROUNDS = 60
JOIN_S = 2.0


def _close_while_reading(server: RunningServer, client: Client, token: str, round_: int) -> str:
    crdt_id = f"gc:close-{round_}"
    client.gcounter_increment(crdt_id)

    def open_stream(c: AsyncClient) -> object:
        return c.subscribe([crdt_id])

    stream = BlockingStream(lambda: AsyncClient(server.url, token, NS), open_stream, 2)
    stream.next(timeout=JOIN_S)
    client.apply(crdt_id, [{"op": "increment"}] * 50)  # the buffer (2) fills
    time.sleep(0.05)
    ended: list[str] = []

    def read() -> None:
        try:
            while True:
                stream.next()
                time.sleep(0.0005)
        except StopIteration:
            ended.append("stop")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(round_ * 0.0005)  # close at varying points of the reading
    stream.close()
    reader.join(JOIN_S)
    return "hung" if reader.is_alive() else ended[0]


async def test_close_ends_a_reader_in_another_thread(server: RunningServer) -> None:
    # One writing client for every round (it only sets each round up; making
    # one cost about 0.06 s, a quarter of a round): each round's stream still
    # makes its own AsyncClient and thread, what the race is about.
    token = make_token(8)
    with Client(server.url, token, NS) as client:
        for round_ in range(ROUNDS):
            outcome = await asyncio.to_thread(_close_while_reading, server, client, token, round_)
            assert outcome == "stop", f"round {round_}: the reader {outcome}"
