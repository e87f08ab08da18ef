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
from pycrdt import Doc, Map

from syncd.crdt.ydoc import NESTING_THREAD_BYTES
from tests.conftest import RunningServer
from tests.ws.support import NS, mint

ENTRIES: Final = 80_000
"""Map entries of the document (one Yjs item each): about 1.4 MB."""

CHUNK: Final = 20_000
"""Entries written per HTTP op: within the body limit."""

LOOP_SHARE_AT_MOST: Final = 0.5
"""The most of the first write's CPU the event loop's thread may spend."""

WAIT_S: Final = 30.0

OPS: Final = f"/v1/namespaces/{NS}/crdts/yd:big/ops"


def _chunks() -> list[str]:
    doc: Doc[Any] = Doc(client_id=21)
    entries = doc.get("m", type=Map)
    out: list[str] = []
    state = b"\x00"
    for start in range(0, ENTRIES, CHUNK):
        with doc.transaction():
            for i in range(start, start + CHUNK):
                entries[f"k{i}"] = i
        out.append(base64.b64encode(doc.get_update(state)).decode())
        state = doc.get_state()
    return out


def _keystroke() -> str:
    doc: Doc[Any] = Doc(client_id=22)
    doc.get("m", type=Map)["typed"] = 1
    return base64.b64encode(doc.get_update()).decode()


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
