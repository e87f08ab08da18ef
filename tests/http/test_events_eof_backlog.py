"""An SSE client that half-closes while it still owes the server a backlog
(it reads nothing more): its EOF ends the stream at once, as it does for a
stream with nothing unsent, not once the send timeout gives up on the backlog."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import RunningServer
from tests.http.support import issue, op
from tests.http.test_events_feed import DOC, Stalled, _on_hand, _subscribers
from tests.ws.support import wait_for

TEXT = 600_000
"""Characters of the CRDT: its snapshot is far more than the stalled reader's
socket takes, so the server holds a backlog for it."""


async def test_an_eof_with_a_backlog_unsent_ends_the_stream_at_once(make_server: Any) -> None:
    server: RunningServer = await make_server(max_body_bytes=2 * TEXT)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        headers = await issue(client)
        r = await op(client, headers, DOC, {"op": "insert", "index": 0, "text": "x" * TEXT})
        assert r.status_code == 200, r.text
        reader = await Stalled.open(server, headers)
        await wait_for(lambda: len(_subscribers(server)) == 1)
        (subscriber,) = _subscribers(server)
        await wait_for(lambda: _on_hand(subscriber))
        reader.writer.write_eof()
        # Well within the send timeout (30 s): the stream is over.
        await wait_for(lambda: not _subscribers(server))
        assert subscriber._closed
        assert server.app.metrics.sse_connections_active._value.get() == 0
        reader.close()
