"""A resume whose replay is larger than ``SERVICE_SUBSCRIBER_BUFFER_BYTES``
starts from a snapshot instead (docs/protocol.md#resuming).

The replay is written in one step, so a reader, however fast, owed all of it
that the kernel did not take at once: past the bound its stream was ended
before ``synced``, and a client resuming from its last delta was cut again
on each reconnect. A snapshot goes out as the connection drains and is not
cut for being the start.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import httpx
import msgpack

from tests.conftest import RunningServer
from tests.http.support import issue, op

PATH = "/v1/namespaces/app/crdts/rg:replay/events"
BOUND = 20_000
TEXT = 1_500_000
OPS = 4


async def _events(port: int, query: str, headers: dict[str, str]) -> list[tuple[str, Any]]:
    """Every event of the stream up to its ``synced``, read as fast as it comes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**24)
    try:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(f"GET {PATH}?{query} HTTP/1.1\r\nHost: t\r\n{head}\r\n".encode())
        status = await reader.readuntil(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 200 "), status
        events: list[tuple[str, Any]] = []
        while True:
            block = await asyncio.wait_for(reader.readuntil(b"\n\n"), 5)
            if block.startswith(b":"):
                continue
            if block.startswith(b"event: synced\ndata: "):
                events.append(("synced", msgpack.unpackb(base64.b64decode(block[20:-2]))))
                return events
            assert block.startswith(b"data: "), block[:40]
            events.append(("message", msgpack.unpackb(base64.b64decode(block[6:-2]))))
    finally:
        writer.close()


async def test_a_replay_past_the_bound_is_a_snapshot_and_reaches_synced(make_server: Any) -> None:
    server: RunningServer = await make_server(
        max_body_bytes=TEXT + 1000, subscriber_buffer_bytes=BOUND
    )
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        headers = await issue(client)
        for i in range(OPS):
            r = await op(
                client,
                headers,
                "rg:replay",
                {"op": "insert", "index": 0, "text": "ab"[i % 2] * TEXT},
            )
            assert r.status_code == 200, r.text
        r = await client.get("/v1/namespaces/app/crdts/rg:replay", headers=headers)
        epoch = r.json()["epoch"]
        events = await _events(server.port, f"since=0&epoch={epoch}", headers)
        assert events[-1] == (
            "synced",
            {"kind": "synced", "ns": "app", "id": "rg:replay", "seq": OPS, "epoch": epoch},
        )
        ((name, first),) = events[:-1]
        assert (name, first["kind"], first["seq"], first["epoch"]) == (
            "message",
            "snapshot",
            OPS,
            epoch,
        )

        # A replay within the bound is still a replay.
        r = await op(client, headers, "rg:replay", {"op": "insert", "index": 0, "text": "c"})
        events = await _events(server.port, f"since={OPS}&epoch={epoch}", headers)
        assert [(n, d["kind"], d["seq"]) for n, d in events] == [
            ("message", "op", OPS + 1),
            ("synced", "synced", OPS + 1),
        ]
