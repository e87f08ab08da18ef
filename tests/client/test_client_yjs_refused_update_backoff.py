"""A YjsProvider whose connection the service keeps closing backs off.

The service closes a connection that sends an update it refuses (over the
document's size limit: 1007, ``crdt_too_large``), and the provider,
reconnecting, syncs by state vector and sends the same update again. It
reset its backoff at every connection made, so it knocked every 100 ms for
ever; it now resets only after a connection that lasted. The real server
behind a counting proxy."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from pycrdt import Doc, Text

from syncd.client.yjs import YjsProvider
from tests.client.conftest import NS, make_token
from tests.client.stalling_proxy import StallingProxy

RUN_S = 1.5
MAX_CONNECTIONS = 6
"""Waits of 100, 200, 400, 800 ms: five connections in 1.5 s at most, one
of slack; a reset backoff made fifteen."""
DOC_LIMIT_BYTES = 4096


async def test_a_refused_update_does_not_reconnect_every_100_ms(
    make_server: Callable[..., Any],
) -> None:
    server = await make_server(max_crdt_bytes=DOC_LIMIT_BYTES)
    token = make_token(5)
    proxy = StallingProxy(server.port)
    await proxy.start()
    doc: Doc[Any] = Doc()
    try:
        async with YjsProvider(f"http://127.0.0.1:{proxy.port}", NS, "big", doc, token) as p:
            await asyncio.wait_for(p.synced.wait(), 5.0)
            doc.get("content", type=Text).insert(0, "x" * (4 * DOC_LIMIT_BYTES))
            await asyncio.sleep(RUN_S)
    finally:
        await proxy.close()
    assert 2 <= proxy.connections <= MAX_CONNECTIONS, proxy.connections
