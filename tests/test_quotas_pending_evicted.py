"""What a Yjs document holds as pending (updates waiting for a dependency,
left out of its measured size) counts in SERVICE_NAMESPACE_MAX_BYTES after
the document leaves memory too: the quotas forgot a document once it was
evicted, so pending updates on documents evicted one after the other went in
far past the namespace's bytes. A deleted document's pending bytes are
freed."""

from __future__ import annotations

import base64
from typing import Any

import httpx
from pycrdt import Doc, Text

from tests.http.support import issue, op
from tests.test_residency import _evict_all

BASE = "/v1/namespaces/app/crdts"


def _pending_update(n: int) -> str:
    """An update of 3,000 characters that depends on one the server never gets."""
    doc: Doc[Any] = Doc(client_id=50 + n)
    text = doc.get("content", type=Text)
    text.insert(0, "a")
    before = doc.get_state()
    text.insert(1, "z" * 3000)
    return base64.b64encode(doc.get_update(before)).decode()


async def test_pending_updates_of_evicted_documents_count(make_server: Any) -> None:
    server = await make_server(namespace_max_bytes=20_000)
    residency = server.app.residency
    async with httpx.AsyncClient(base_url=server.url) as c:
        h = await issue(c, admin=True)
        answers = []
        for i in range(10):
            r = await op(c, h, f"yd:{i}", {"op": "update", "update": _pending_update(i)})
            answers.append(r.status_code)
            await _evict_all(server)
            residency.budget_bytes = 1 << 30
        # About 3 KB pending each: six fit under 20,000 bytes, as without evictions.
        assert answers == [200] * 6 + [403] * 4, answers
        # A deleted document's pending bytes leave the count.
        assert (await c.delete(f"{BASE}/yd:0", headers=h)).status_code == 204
        r = await op(c, h, "yd:new", {"op": "update", "update": _pending_update(20)})
        assert r.status_code == 200, r.text
