"""Edits made while a YjsProvider is disconnected are not queued: each
reconnect's sync (its state vector exchange) covers them all, and the
queue was thrown away unsent at that sync anyway. They were queued, one
message per local transaction, for as long as the outage lasted: memory that
grew with every edit of an app left offline. A real server, killed and
started again on the same port and data."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from pycrdt import Doc, Text

from syncd.client.yjs import YjsProvider
from tests.client.conftest import NS, make_token
from tests.conftest import Subprocess

WAIT_S = 10.0
EDITS = 2000


async def _eventually(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT_S):
        while not check():
            await asyncio.sleep(0.02)


async def test_edits_made_offline_are_not_queued_and_still_sync(
    spawn_server: Callable[..., Subprocess],
) -> None:
    proc = spawn_server({"SERVICE_FSYNC": "batch"})
    port = proc.port
    token = make_token(8)
    doc: Doc[Any] = Doc()
    text = doc.get("content", type=Text)
    async with YjsProvider(proc.url, NS, "offline", doc, token) as provider:
        await asyncio.wait_for(provider.synced.wait(), WAIT_S)
        text.insert(0, "online ")
        await asyncio.to_thread(proc.kill)
        await _eventually(lambda: not provider.synced.is_set())
        for i in range(EDITS):
            text.insert(len(str(text)), str(i % 10))
        assert provider._outbox.qsize() == 0
        proc = await asyncio.to_thread(spawn_server, {"SERVICE_FSYNC": "batch"}, port=port)
        await asyncio.wait_for(provider.synced.wait(), WAIT_S)
        other: Doc[Any] = Doc()
        async with YjsProvider(proc.url, NS, "offline", other, token) as reader:
            await asyncio.wait_for(reader.synced.wait(), WAIT_S)
            other_text = other.get("content", type=Text)
            await _eventually(lambda: str(other_text) == str(text))
        assert len(str(text)) == len("online ") + EDITS
