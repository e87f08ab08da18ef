"""``?at=SEQ`` of a CRDT deleted and created again while the read waits
(syncd/history/service.py): the read found one life and rebuilt the state
from the history of whichever life was there a moment later. Answered with
the first life's epoch and the second life's state, a client that tells
lives apart by the epoch took the new life's past for the old one's. It is
404, as a restore and a revert across a delete are (test_restore_lives.py)."""

from __future__ import annotations

from typing import Any

import httpx

from syncd.auth.authenticator import ROOT
from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"


async def test_a_read_at_a_seq_across_a_delete_and_re_create_is_404(
    server: RunningServer,
) -> None:
    app = server.app
    service = app.service
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        for element in ("old-1", "old-2", "old-3"):
            assert (await op(client, h, "or:x", {"op": "add", "element": element})).is_success
        old = (await client.get(f"{BASE}/or:x", headers=h)).json()
        durable_read = service.durable_read
        calls = []

        async def second_read_sees_a_new_life(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            if len(calls) == 2:  # the rebuild's: after the read found its life
                assert await service.delete("app", "or:x")
                for element in ("new-1", "new-2", "new-3"):
                    await service.apply_ops(
                        "app", "or:x", {"op": "add", "element": element}, ROOT, "http"
                    )
            return await durable_read(*args, **kwargs)

        service.durable_read = second_read_sees_a_new_life  # type: ignore[method-assign]
        try:
            r = await client.get(f"{BASE}/or:x?at=1", headers=h)
        finally:
            service.durable_read = durable_read  # type: ignore[method-assign]
        assert len(calls) >= 2
        body = r.json()
        # Never the old life's epoch with the new life's state.
        assert not (r.status_code == 200 and body["epoch"] == old["epoch"]), body
        assert r.status_code == 404, r.text
        assert body["error"] == "not_found"
