"""The first HTTP write to a large Yjs document after it is loaded reads the
document's type depths (the MAX_TYPE_DEPTH bound, syncd.crdt.ydoc_nesting)
in a thread, not on the event loop (CrdtService.apply_ops awaits
YDoc.read_nesting, as a Yjs socket's write does since 2ef3cc2). The read
walks every item in Python: about 0.4 s of CPU for the 1.4 MB document here,
during which the server answered no one.

The document is loaded by a read first: the write then takes the op path
of a CRDT in memory (CrdtService.apply_soon, no await), which now leaves a
YDoc whose depths are not known to apply_ops.

Measured in CPU time, not wall-clock: the event loop's thread (this test's
own: the server and the HTTP client run in it) against the whole process,
over that first write, one map entry."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import httpx

from syncd.crdt.ydoc import NESTING_THREAD_BYTES
from tests.conftest import RunningServer
from tests.ws.support import NS, mint
from tests.yjs.large_doc import WAIT_S, keystroke, map_chunks

LOOP_SHARE_AT_MOST: Final = 0.5
"""The most of the first write's CPU the event loop's thread may spend."""

OPS: Final = f"/v1/namespaces/{NS}/crdts/yd:big/ops"


def _chunks() -> list[str]:
    return map_chunks(21)


def _keystroke() -> str:
    return base64.b64encode(keystroke(22)).decode()


async def test_the_first_http_write_after_a_load_reads_the_depths_off_the_loop(
    make_server: Callable[..., Any], tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    headers = {"Authorization": f"Bearer {mint()}"}
    first: RunningServer = await make_server(data_dir=data_dir)
    async with httpx.AsyncClient(base_url=first.url, timeout=WAIT_S, headers=headers) as client:
        for chunk in _chunks():
            r = await client.post(OPS, json={"op": "update", "update": chunk})
            assert r.status_code == 200, r.text
    await first.server.shutdown()
    server: RunningServer = await make_server(data_dir=data_dir)  # loads it afresh
    keystroke = {"op": "update", "update": _keystroke()}
    async with httpx.AsyncClient(base_url=server.url, timeout=WAIT_S, headers=headers) as client:
        # Loaded by a read (its load costs the loop as much, and is not this test's).
        assert (await client.get(OPS.removesuffix("/ops"))).status_code == 200
        entry = server.app.service.engine.get(NS, "yd:big")
        assert entry is not None
        assert len(entry.crdt.encoded()) >= NESTING_THREAD_BYTES
        loop_started, started = time.thread_time(), time.process_time()
        r = await client.post(OPS, json=keystroke)
        loop_cpu, cpu = time.thread_time() - loop_started, time.process_time() - started
        assert r.status_code == 200, r.text
    assert loop_cpu <= LOOP_SHARE_AT_MOST * cpu, (loop_cpu, cpu)
