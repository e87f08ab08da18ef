"""``?ping=event`` on the event stream: the keep-alive as a named event,
``event: ping`` with empty data, which a browser's EventSource hands to its
page (it hides comments), so a client reading through one can tell a silent
stream from a quiet one. Only the stream that asks gets it; the default stays
the ``: ping`` comment. A bad or repeated value is 400 naming ``ping``, as
``since`` and ``epoch`` are refused.

Real server, real socket; the ping interval is short (in process, below the
configuration's 1 s minimum), and only lower bounds are put on time: a
loaded machine delays pings, never brings them early."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from syncd.http.handlers.events import PING, PING_EVENT
from tests.conftest import RunningServer
from tests.http.support import issue, op

EVENTS = "/v1/namespaces/app/crdts/gc:pings/events"
PING_S = 0.2
"""The test servers' SERVICE_SSE_PING_S."""
WHEEL_EARLY = PING_S / 16
"""How early the ping wheel may fire a ping (one of its ticks)."""


class Stream:
    """A raw-socket SSE reader: the answer's status, then whole blocks (an
    event or a comment, with its blank line) and when each came."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int, query: str, method: str = "GET") -> tuple[Stream, int, Any]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"{method} {EVENTS}?{query} HTTP/1.1\r\nHost: t\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        fields = {
            ln.split(":", 1)[0].lower(): ln.split(":", 1)[1].strip() for ln in lines[1:] if ln
        }
        body = None
        if status != 200 and method == "GET":
            body = json.loads(await reader.readexactly(int(fields["content-length"])))
        return cls(reader, writer), status, body

    async def block(self, timeout: float = 5.0) -> tuple[bytes, float]:
        data = await asyncio.wait_for(self.reader.readuntil(b"\n\n"), timeout)
        return data, time.monotonic()

    async def blocks_for(self, seconds: float) -> list[bytes]:
        """Every block that comes within ``seconds``."""
        got: list[bytes] = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                got.append((await self.block(left))[0])
            except TimeoutError:
                break
        return got

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
async def pinging(make_server: Any) -> RunningServer:
    server: RunningServer = await make_server(sse_ping_s=PING_S)
    return server


@pytest.fixture
async def token(pinging: RunningServer) -> str:
    async with httpx.AsyncClient(base_url=pinging.url) as client:
        headers = await issue(client)
    return headers["authorization"].removeprefix("Bearer ")


def _is_data(block: bytes) -> bool:
    return block.startswith(b"data: ") and block.count(b"\n") == 2


async def test_ping_event_comes_at_the_interval_instead_of_the_comment(
    pinging: RunningServer, token: str
) -> None:
    stream, status, _ = await Stream.open(pinging.port, f"token={token}&ping=event")
    try:
        assert status == 200
        first, _ = await stream.block()
        assert _is_data(first)  # the snapshot
        synced, started = await stream.block()
        assert synced.startswith(b"event: synced\n")
        times: list[float] = []
        while len(times) < 4:
            block, at = await stream.block()
            assert block == PING_EVENT, block  # never the comment, nor anything else
            times.append(at)
        # Each a full interval after the last (less a wheel tick), the first
        # one after the start.
        gaps = [b - a for a, b in zip([started, *times], times, strict=False)]
        assert min(gaps) >= PING_S - WHEEL_EARLY - 0.01, gaps
        # Deltas still come between them, as ordinary data events.
        async with httpx.AsyncClient(base_url=pinging.url) as client:
            h = {"authorization": f"Bearer {token}"}
            assert (await op(client, h, "gc:pings", {"op": "increment"})).status_code == 200
        for _ in range(20):
            block, _ = await stream.block()
            if block != PING_EVENT:
                assert _is_data(block), block
                break
        else:
            pytest.fail("no delta among the pings")
    finally:
        stream.close()


async def test_default_stream_pings_with_comments_only(pinging: RunningServer, token: str) -> None:
    stream, status, _ = await Stream.open(pinging.port, f"token={token}")
    try:
        assert status == 200
        blocks = await stream.blocks_for(PING_S * 5)
        assert blocks.count(PING) >= 2, blocks
        assert not any(b"event: ping" in block for block in blocks), blocks
    finally:
        stream.close()


async def test_each_stream_gets_the_ping_it_asked_for(pinging: RunningServer, token: str) -> None:
    named, _, _ = await Stream.open(pinging.port, f"token={token}&ping=event")
    plain, _, _ = await Stream.open(pinging.port, f"token={token}")
    try:
        named_blocks, plain_blocks = await asyncio.gather(
            named.blocks_for(PING_S * 5), plain.blocks_for(PING_S * 5)
        )
        assert PING_EVENT in named_blocks and PING not in named_blocks
        assert PING in plain_blocks and PING_EVENT not in plain_blocks
    finally:
        named.close()
        plain.close()


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("ping=comment", "ping: event is the only one (leave it out for the comment)"),
        ("ping=", "ping: event is the only one (leave it out for the comment)"),
        ("ping=EVENT", "ping: event is the only one (leave it out for the comment)"),
        ("ping=event%00", "ping: event is the only one (leave it out for the comment)"),
        ("ping=event&ping=event", "ping: given more than once"),
        ("ping=event&ping=bogus", "ping: given more than once"),
        ("since=0&ping=event&ping", "ping: given more than once"),
    ],
)
async def test_bad_or_repeated_ping_is_400_naming_it(
    pinging: RunningServer, token: str, query: str, message: str
) -> None:
    stream, status, body = await Stream.open(pinging.port, f"token={token}&{query}")
    stream.close()
    assert status == 400
    assert body == {"error": "bad_request", "message": message}
    assert not pinging.app.hub.subscribed("app", "gc:pings")


async def test_head_refuses_a_bad_ping_as_get_does(pinging: RunningServer, token: str) -> None:
    for query, want in (("ping=event", 200), ("ping=no", 400)):
        stream, status, _ = await Stream.open(pinging.port, f"token={token}&{query}", "HEAD")
        stream.close()
        assert status == want, query
