"""A ``/history`` page of a CRDT deleted while the page is read
(syncd/history/service.py): that life's history is gone with it, so the page
is 404, as ``?at=``, a restore and a revert are then. It answered 200 with
no ops and ``oldest`` at the CRDT's seq, which says the CRDT is there with
its history expired."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"


@pytest.mark.parametrize(
    ("query", "read"),
    [("", "history"), ("?client_id=7", "history_window"), ("?origin=o:a", "history_window")],
)
async def test_a_page_of_a_crdt_deleted_while_it_is_read_is_404(
    server: RunningServer, query: str, read: str
) -> None:
    app = server.app
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        for element in ("a", "b", "c"):
            r = await op(client, h, "or:x", {"op": "add", "element": element}, query="?origin=o:a")
            assert r.is_success, r.text
        store_read = getattr(app.store, read)

        async def delete_then_read(*args: Any, **kwargs: Any) -> Any:
            await app.service.delete("app", "or:x")
            return await store_read(*args, **kwargs)

        setattr(app.store, read, delete_then_read)
        try:
            r = await client.get(f"{BASE}/or:x/history{query}", headers=h)
        finally:
            setattr(app.store, read, store_read)
        assert r.status_code == 404, r.text
        assert r.json()["error"] == "not_found"
