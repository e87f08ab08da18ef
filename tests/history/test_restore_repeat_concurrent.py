"""A restore retried with its op_id while the first is still reading the past
(syncd/history/restore.py: repeated). The retry checked for the first's ops
before its own read of the past only; by the time it computed its ops, the
first had applied, and another writer had added to the set, so the retry's
ops were more than the first's: ``<op_id>/0`` was a repeat and skipped, the
rest were new and applied, taking back a later write the first never saw."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"


async def test_a_retry_that_overlaps_the_first_restore_applies_nothing(
    server: RunningServer,
) -> None:
    app = server.app
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        for element in ("a", "b"):
            assert (await op(client, h, "or:s", {"op": "add", "element": element})).is_success
        body = {"seq": 1, "op_id": "undo-1"}
        history_base = app.store.history_base
        meanwhile: list[httpx.Response] = []
        hooked = []

        async def the_first_lands_meanwhile(*args: Any) -> Any:
            if not hooked:  # the retry's read (the first's own read passes through)
                hooked.append(True)
                # The first request, answered, then another writer's two adds.
                meanwhile.append(await client.post(f"{BASE}/or:s/restore", json=body, headers=h))
                for element in ("c", "d"):
                    meanwhile.append(await op(client, h, "or:s", {"op": "add", "element": element}))
            return await history_base(*args)

        app.store.history_base = the_first_lands_meanwhile  # type: ignore[method-assign]
        try:
            retry = await client.post(f"{BASE}/or:s/restore", json=body, headers=h)
        finally:
            app.store.history_base = history_base  # type: ignore[method-assign]
        first = meanwhile[0]
        assert first.status_code == 200 and first.json()["applied"] == 1, first.text
        assert retry.status_code == 200, retry.text
        assert retry.json() == {
            "ok": True,
            "seq": first.json()["seq"],
            "restored": 1,
            "duplicate": True,
        }
        read = (await client.get(f"{BASE}/or:s", headers=h)).json()
        assert sorted(read["value"]) == ["a", "c", "d"]
