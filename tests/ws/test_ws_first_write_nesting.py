"""The first write over the native WebSocket to a large Yjs document after it
is loaded reads the document's type depths (the MAX_TYPE_DEPTH bound) in a
thread, not in ``CrdtService.stage`` on the event loop: the connection's run
awaits ``CrdtService.ensure_for_write`` for a document whose depths are not
read yet, as HTTP writes do (tests/test_service_http_first_write_nesting.py,
whose document and keystroke this test writes).

Measured in CPU time, not wall-clock: the event loop's thread (this test's
own: the server and the client run in it) against the whole process, over
that first write."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import httpx

from syncd.crdt.ydoc import NESTING_THREAD_BYTES
from tests.conftest import RunningServer
from tests.test_service_http_first_write_nesting import OPS, WAIT_S, _chunks, _keystroke
from tests.ws.support import NS, mint, op, open_ws

LOOP_SHARE_AT_MOST: Final = 0.5
"""The most of the first write's CPU the event loop's thread may spend."""


async def test_the_first_websocket_write_after_a_load_reads_the_depths_off_the_loop(
    make_server: Callable[..., Any], tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    token = mint()
    headers = {"Authorization": f"Bearer {token}"}
    first: RunningServer = await make_server(data_dir=data_dir)
    async with httpx.AsyncClient(base_url=first.url, timeout=WAIT_S, headers=headers) as client:
        for chunk in _chunks():
            r = await client.post(OPS, json={"op": "update", "update": chunk})
            assert r.status_code == 200, r.text
    await first.server.shutdown()
    server: RunningServer = await make_server(data_dir=data_dir)  # loads it afresh
    async with httpx.AsyncClient(base_url=server.url, timeout=WAIT_S, headers=headers) as client:
        # Loaded by a read (its load is not this test's).
        assert (await client.get(OPS.removesuffix("/ops"))).status_code == 200
    entry = server.app.service.engine.get(NS, "yd:big")
    assert entry is not None
    assert len(entry.crdt.encoded()) >= NESTING_THREAD_BYTES
    async with open_ws(server, token) as ws:
        loop_started, started = time.thread_time(), time.process_time()
        answer = await op(ws, "yd:big", {"op": "update", "update": _keystroke()})
        loop_cpu, cpu = time.thread_time() - loop_started, time.process_time() - started
    assert answer["kind"] == "ack", answer
    assert loop_cpu <= LOOP_SHARE_AT_MOST * cpu, (loop_cpu, cpu)
