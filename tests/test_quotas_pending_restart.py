"""What a Yjs document holds as pending (updates waiting for a dependency)
counts in its namespace after a restart, before any op or load touches the
document again: the quotas noted it in memory only, after each op, so a
restart forgot every document's, and pending updates sent after it went in
past SERVICE_NAMESPACE_MAX_BYTES (and GET .../usage never showed any).
Pending bytes are now part of the document's measured size, which the store
keeps (and the memory budget's estimate counts)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
from pycrdt import Doc, Text

from tests.http.support import issue, op

USAGE = "/v1/namespaces/app/usage"
PENDING = 3000
"""Bytes of each update that waits (about: its encoding adds a few)."""


def _pending_update(n: int) -> str:
    """An update of PENDING characters that depends on one the server never gets."""
    doc: Doc[Any] = Doc(client_id=50 + n)
    text = doc.get("content", type=Text)
    text.insert(0, "a")
    before = doc.get_state()
    text.insert(1, "z" * PENDING)
    return base64.b64encode(doc.get_update(before)).decode()


async def _send(c: httpx.AsyncClient, h: dict[str, str], first: int, count: int) -> list[int]:
    answers = []
    for i in range(first, first + count):
        r = await op(c, h, f"yd:{i}", {"op": "update", "update": _pending_update(i)})
        answers.append(r.status_code)
    return answers


async def test_pending_bytes_count_after_a_restart(make_server: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = await make_server(namespace_max_bytes=20_000, data_dir=data)
    async with httpx.AsyncClient(base_url=server.url) as c:
        h = await issue(c, admin=True)
        assert await _send(c, h, 0, 4) == [200] * 4
        before = (await c.get(USAGE, headers=h)).json()
    await server.server.shutdown()

    server = await make_server(namespace_max_bytes=20_000, data_dir=data)
    assert len(server.app.engine) == 0  # nothing loaded yet
    async with httpx.AsyncClient(base_url=server.url) as c:
        h = await issue(c, admin=True)
        after = (await c.get(USAGE, headers=h)).json()
        assert after["bytes"] == before["bytes"] >= 4 * PENDING, (before, after)
        # Four wait already: two more fit under 20,000 bytes, as without the restart.
        assert await _send(c, h, 10, 4) == [200, 200, 403, 403]
        # A document read back holds its pending bytes in the memory estimate.
        assert (await c.get("/v1/namespaces/app/crdts/yd:0", headers=h)).status_code == 200
        entry = server.app.engine.get("app", "yd:0")
        assert entry is not None and entry.size >= PENDING
