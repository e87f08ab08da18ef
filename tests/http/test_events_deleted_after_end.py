"""A stream's read ended: a deletion made from then on is not sent
(docs/protocol.md#the-sse-stream: "Nothing made after that instant is sent").

Op deltas made from the end on were held back by their ``ts``; a ``deleted``
delta has none, and one made after the end, before the shared expiry wheel
had its turn (up to a second), reached the reader ahead of ``event: end``.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS, issue, op
from tests.http.test_events import SseReader

PATH = "/v1/namespaces/app/crdts/gc:gone/events"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def test_a_deletion_after_the_read_ended_is_not_sent(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        writer = await issue(client, client_id=8)
        r = await op(client, writer, "gc:gone", {"op": "increment"})
        assert r.status_code == 200, r.text
        ends = _now_ms() + 150
        reader_headers = await issue(client, rules={"r": [{"p": "gc:gone", "e": ends}]})
        stream, status, _ = await SseReader.open(server.port, PATH, reader_headers)
        assert status == 200
        assert (await stream.named())[0] == "message"  # the snapshot
        assert (await stream.named())[0] == "synced"
        await asyncio.sleep((ends - _now_ms() + 20) / 1000)
        r = await client.delete("/v1/namespaces/app/crdts/gc:gone", headers=ADMIN_HEADERS)
        assert r.status_code == 204, r.text
        # Whatever came before the end: nothing (the deletion came after it).
        end = await stream.end_event(timeout=3)
        assert end["error"] == "forbidden"
        assert await stream.remainder() == b""
        stream.close()
