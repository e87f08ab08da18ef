"""A live burst larger than the subscriber bound (one op batch, fanned out at
once) on an SSE stream: the reader is not cut for it. It skips what it could
not take and gets a fresh snapshot, as a WebSocket subscription does
(docs/limits.md, "unsent bytes a subscriber may owe")."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import RunningServer
from tests.http.support import issue, op
from tests.http.test_events_feed import DOC, Stalled, _on_hand, _subscribers
from tests.store.support import gated_server
from tests.ws.support import mint, wait_for

BOUND = 8192
BATCH = 200
TEXT = "t" * 500
"""Each op's event is some 900 bytes: the batch is twenty times the bound, far
more than the small socket buffers of :class:`Stalled` take at once."""
WAIT_S = 10.0


async def _seq_reached(reader: Stalled, seq: int) -> list[dict[str, Any]]:
    """Data events until one is at ``seq`` (an op of it, or a snapshot at or past it)."""
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(WAIT_S):
        while True:
            (event,) = await reader.events(1)
            seen.append(event)
            if event.get("seq", 0) >= seq and event["kind"] in ("op", "snapshot"):
                return seen


async def test_a_burst_past_the_bound_does_not_cut_a_reader_that_keeps_up(
    make_server: Any,
) -> None:
    server: RunningServer = await make_server(
        subscriber_buffer_bytes=BOUND, max_body_bytes=4 * 1024 * 1024
    )
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        headers = await issue(client)
        r = await op(client, headers, DOC, {"op": "insert", "index": 0, "text": "start"})
        assert r.status_code == 200, r.text
        reader = await Stalled.open(server, headers)
        assert await reader.head() == 200
        (first,) = await reader.events(1)
        assert first["kind"] == "snapshot" and first["seq"] == 1
        # The reader reads as fast as it can from here on (each call below).
        reading = asyncio.ensure_future(_seq_reached(reader, 1 + BATCH))
        batch = [{"op": "insert", "index": 0, "text": TEXT} for _ in range(BATCH)]
        r = await op(client, headers, DOC, batch)
        assert r.status_code == 200, r.text
        seen = await reading
        assert seen[-1]["seq"] == 1 + BATCH
        # Still open, and live: the next op comes as a delta.
        assert len(_subscribers(server)) == 1
        r = await op(client, headers, DOC, {"op": "insert", "index": 0, "text": "after"})
        assert r.status_code == 200, r.text
        (after,) = await reader.events(1)
        assert (after["kind"], after["seq"]) == ("op", 2 + BATCH)
        reader.close()


SEED_TEXT = 600_000
"""Characters of the CRDT: its snapshot event stays in the stream's feed while
the reader reads nothing (see tests/http/test_events_end.py)."""
VALUE = "v" * 3000


async def test_a_resync_waits_for_the_ops_in_flight(tmp_path: Path) -> None:
    async with gated_server(
        tmp_path / "data", subscriber_buffer_bytes=BOUND, max_body_bytes=2 * SEED_TEXT
    ) as (server, faults):
        headers = {"authorization": f"Bearer {mint(ns='app')}"}
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            r = await op(
                client, headers, DOC, {"op": "insert", "index": 0, "text": "x" * SEED_TEXT}
            )
            assert r.status_code == 200, r.text
            reader = await Stalled.open(server, headers)
            await wait_for(lambda: len(_subscribers(server)) == 1)
            (subscriber,) = _subscribers(server)
            await wait_for(lambda: _on_hand(subscriber))
            taken = 0
            while not subscriber._lagging:
                r = await op(client, headers, DOC, {"op": "insert", "index": 0, "text": VALUE})
                assert r.status_code == 200, r.text
                seq = r.json()["seq"]
                await wait_for(lambda: subscriber._last_seq == seq or subscriber._lagging)  # noqa: B023
                taken += 0 if subscriber._lagging else 1
            # An op in flight (its write held) when the reader has read what it was sent.
            gate = threading.Event()
            faults.entered.clear()
            faults.gate = gate
            in_flight = asyncio.ensure_future(
                op(client, headers, DOC, {"op": "insert", "index": 0, "text": "held"})
            )
            try:
                await wait_for(faults.entered.is_set)
                assert await reader.head() == 200
                first = await reader.events(1 + taken)
                assert [e["kind"] for e in first] == ["snapshot"] + ["op"] * taken
                # The resync waits for the op to be durable, and deltas with it.
                await wait_for(lambda: subscriber._pending is not None)
            finally:
                gate.set()
            r = await in_flight
            assert r.status_code == 200, r.text
            (fresh,) = await reader.events(1)
            assert (fresh["kind"], fresh["seq"]) == ("snapshot", r.json()["seq"])
            r = await op(client, headers, DOC, {"op": "insert", "index": 0, "text": "live"})
            (live,) = await reader.events(1)
            assert (live["kind"], live["seq"]) == ("op", r.json()["seq"])
            reader.close()
