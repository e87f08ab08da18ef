"""A blocking stream the service ends with an error (here a revocation) while
its reader is slow: the reader gets every delta queued before the end, then
the error. The end used to be put by dropping the oldest unread delta when
the buffer was full, so a slow reader saw a hole in seq."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from syncd.client import Client, TokenRevokedError
from syncd.client.aio import AsyncClient
from syncd.client.sync import BlockingStream
from tests.client.conftest import NS, make_token
from tests.conftest import ADMIN, RunningServer

WAIT_S = 10.0


def _revoke(server: RunningServer, client_id: int) -> None:
    r = httpx.post(
        f"{server.url}/v1/namespaces/{NS}/revocations",
        json={"client_id": client_id},
        headers={"authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code == 200, r.text


def _slow_reader_sees(server: RunningServer, via: str, client_id: int) -> list[Any]:
    token = make_token(client_id)
    crdt_id = f"gc:slow-{via}"
    with Client(server.url, token, NS) as writer:
        writer.gcounter_increment(crdt_id)

        def open_stream(c: AsyncClient) -> Any:
            return c.subscribe([crdt_id]) if via == "ws" else c.events(crdt_id)

        with BlockingStream(lambda: AsyncClient(server.url, token, NS), open_stream, 2) as stream:
            first = stream.next(timeout=WAIT_S)  # the snapshot at 1
            writer.apply(crdt_id, [{"op": "increment"}] * 4)  # seqs 2..5
            deadline = time.monotonic() + WAIT_S
            while not stream._queue.full() and time.monotonic() < deadline:
                time.sleep(0.01)  # the buffer (2) fills: the loop thread waits
            _revoke(server, client_id)
            got: list[Any] = [(first["kind"], first["seq"])]
            try:
                while True:
                    delta = stream.next(timeout=WAIT_S)
                    got.append((delta["kind"], delta["seq"]))
                    time.sleep(0.1)  # a slow reader
            except TokenRevokedError:
                got.append("token_revoked")
            return got


async def test_a_slow_reader_gets_every_delta_then_the_error(server: RunningServer) -> None:
    for client_id, via in ((8, "ws"), (9, "sse")):
        got = await asyncio.to_thread(_slow_reader_sees, server, via, client_id)
        ops = [("op", seq) for seq in range(2, 6)]
        assert got == [("snapshot", 1), *ops, "token_revoked"], via
