"""SSE streams whose read ends while their first event (a large snapshot)
is still going out: the ``end`` event is the last thing the stream sends."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import httpx
import msgpack

from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS, issue, op
from tests.http.test_events_feed import DOC, Stalled, _on_hand, _subscribers
from tests.ws.support import wait_for

REVOKED = {"error": "token_revoked", "message": "token revoked"}
SNAPSHOT_TEXT = 600_000
"""Characters of the CRDT: its snapshot event is far more than a stalled
reader's socket and the connection's high-water mark take, so it stays in
the stream's feed until the reader reads."""


async def _rest(reader: Stalled) -> list[bytes]:
    """Every block the stream sends until it closes."""
    blocks: list[bytes] = []
    while (block := await reader.block()) is not None:
        blocks.append(block)
    return blocks


async def test_nothing_follows_the_end_of_a_stream_revoked_behind_its_snapshot(
    make_server: Any,
) -> None:
    server: RunningServer = await make_server(max_body_bytes=2 * SNAPSHOT_TEXT, sse_ping_s=0.05)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        writer = await issue(client, client_id=8)
        reader_headers = await issue(client, client_id=7)
        r = await op(client, writer, DOC, {"op": "insert", "index": 0, "text": "x" * SNAPSHOT_TEXT})
        assert r.status_code == 200, r.text
        reader = await Stalled.open(server, reader_headers)
        await wait_for(lambda: len(_subscribers(server)) == 1)
        (subscriber,) = _subscribers(server)
        await wait_for(lambda: _on_hand(subscriber))
        r = await client.post(
            "/v1/namespaces/app/revocations",
            json={"client_id": 7, "before_ms": time.time_ns() // 1_000_000 + 1},
            headers=ADMIN_HEADERS,
        )
        assert r.status_code == 200, r.text
        # Made after the revocation, and pings due meanwhile: none may reach the reader.
        r = await op(client, writer, DOC, {"op": "insert", "index": 0, "text": "after"})
        assert r.status_code == 200, r.text
        await asyncio.sleep(0.3)  # several pings' worth
        assert await reader.head() == 200
        blocks = await _rest(reader)
        reader.close()
    data = [b for b in blocks if b.startswith(b"data: ")]
    assert len(data) == 1
    first = msgpack.unpackb(base64.b64decode(data[0][6:]))
    assert first["kind"] == "snapshot"
    assert blocks[-1] == b"event: end\ndata: " + json.dumps(REVOKED, separators=(",", ":")).encode()
    # The start ends with synced, right behind the snapshot; no other named event.
    assert blocks[1].startswith(b"event: synced\ndata: ")
    assert all(not b.startswith(b"event: ") for b in blocks[:1] + blocks[2:-1])
