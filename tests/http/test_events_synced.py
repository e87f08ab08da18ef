"""``event: synced`` ends the start of every SSE stream (docs/protocol.md#resuming).

Before it, a stream resumed up to date sent nothing until the next op, so a
reader could not tell "caught up" from "still waiting".
"""

from __future__ import annotations

import httpx

from tests.conftest import RunningServer
from tests.http.support import issue, op
from tests.http.test_events import SseReader

PATH = "/v1/namespaces/app/crdts/gc:sy/events"


async def test_every_start_ends_with_synced(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        fresh, _, _ = await SseReader.open(server.port, PATH, h)
        name, snapshot = await fresh.named()
        assert (name, snapshot["kind"], snapshot["seq"]) == ("message", "snapshot", 0)
        assert await fresh.named() == (
            "synced",
            {"kind": "synced", "ns": "app", "id": "gc:sy", "seq": 0, "epoch": None},
        )
        for _ in range(3):
            await op(client, h, "gc:sy", {"op": "increment"})
        deltas = [await fresh.named() for _ in range(3)]
        assert [(n, d["seq"]) for n, d in deltas] == [
            ("message", 1),
            ("message", 2),
            ("message", 3),
        ]
        epoch = deltas[0][1]["epoch"]
        fresh.close()
        synced = {"kind": "synced", "ns": "app", "id": "gc:sy", "seq": 3, "epoch": epoch}

        # Up to date: the synced event alone, then the next op.
        current, _, _ = await SseReader.open(server.port, f"{PATH}?since=3&epoch={epoch}", h)
        assert await current.named() == ("synced", synced)
        await op(client, h, "gc:sy", {"op": "increment"})
        name, delta = await current.named()
        assert (name, delta["kind"], delta["seq"]) == ("message", "op", 4)
        current.close()

        # A replay: its ops, then synced at the last of them.
        replay, _, _ = await SseReader.open(server.port, f"{PATH}?since=2&epoch={epoch}", h)
        got = [await replay.named() for _ in range(3)]
        assert [(n, d["seq"]) for n, d in got[:2]] == [("message", 3), ("message", 4)]
        assert got[2] == ("synced", {**synced, "seq": 4})
        replay.close()

        # Another epoch: a snapshot, then synced at the current life.
        other, _, _ = await SseReader.open(server.port, f"{PATH}?since=2&epoch=deadbeef", h)
        name, snapshot = await other.named()
        assert (name, snapshot["kind"], snapshot["seq"]) == ("message", "snapshot", 4)
        assert await other.named() == ("synced", {**synced, "seq": 4})
        other.close()
