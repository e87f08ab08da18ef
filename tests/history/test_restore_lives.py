"""A restore whose CRDT is deleted and created again while it reads the past
(syncd/history/service.py): the state it read is of a life that is gone, so
it is 404, as a revert is, and applies nothing to the new life."""

from __future__ import annotations

from typing import Any

import httpx

from syncd.auth.authenticator import ROOT
from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"


async def test_a_restore_across_a_delete_and_re_create_applies_nothing(
    server: RunningServer,
) -> None:
    app = server.app
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        assert (await op(client, h, "or:x", {"op": "add", "element": "old"})).is_success
        assert (await op(client, h, "or:x", {"op": "add", "element": "older"})).is_success
        history_base = app.store.history_base
        done = []

        async def read_then_a_new_life(*args: Any) -> Any:
            got = await history_base(*args)
            if not done:
                assert await app.service.delete("app", "or:x")
                done.append(
                    await app.service.apply_ops(
                        "app", "or:x", {"op": "add", "element": "new"}, ROOT, "http"
                    )
                )
            return got

        app.store.history_base = read_then_a_new_life  # type: ignore[method-assign]
        try:
            r = await client.post(f"{BASE}/or:x/restore", json={"seq": 1}, headers=h)
        finally:
            app.store.history_base = history_base  # type: ignore[method-assign]
        assert done
        assert r.status_code == 404, r.text
        assert r.json()["error"] == "not_found"
        now = (await client.get(f"{BASE}/or:x", headers=h)).json()
        assert (now["seq"], now["value"]) == (1, ["new"])


async def _two_lives_of_ops(client: httpx.AsyncClient, h: dict[str, str]) -> None:
    for element in ("a", "b"):
        assert (await op(client, h, "or:x", {"op": "add", "element": element})).is_success


async def test_a_crdt_deleted_while_its_past_is_read_is_404_not_410(
    server: RunningServer,
) -> None:
    """Restore and ``?at=`` read the past of the life they found; deleted
    meanwhile, that history is gone with it: 404 ``not_found`` (before: 410
    ``history_expired``, as if the CRDT were there with less retained)."""
    app = server.app
    history_base = app.store.history_base

    async def delete_then_read(*args: Any) -> Any:
        await app.service.delete("app", "or:x")
        return await history_base(*args)

    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        app.store.history_base = delete_then_read  # type: ignore[method-assign]
        try:
            for request in (
                lambda: client.post(f"{BASE}/or:x/restore", json={"seq": 1}, headers=h),
                lambda: client.get(f"{BASE}/or:x?at=1", headers=h),
            ):
                await _two_lives_of_ops(client, h)
                r = await request()
                assert r.status_code == 404, r.text
                assert r.json()["error"] == "not_found"
        finally:
            app.store.history_base = history_base  # type: ignore[method-assign]


async def test_a_revert_of_a_crdt_deleted_while_its_window_is_read_is_404(
    server: RunningServer,
) -> None:
    """Before: 200 with nothing matched (no since_seq) or 410 (since_seq 1)
    for a CRDT that no longer exists."""
    app = server.app
    history_window = app.store.history_window

    async def delete_then_read(*args: Any) -> Any:
        await app.service.delete("app", "or:x")
        return await history_window(*args)

    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        app.store.history_window = delete_then_read  # type: ignore[method-assign]
        try:
            for body in ({"client_id": 7}, {"client_id": 7, "since_seq": 1}):
                await _two_lives_of_ops(client, h)
                r = await client.post(f"{BASE}/or:x/revert", json=body, headers=h)
                assert r.status_code == 404, r.text
                assert r.json()["error"] == "not_found"
        finally:
            app.store.history_window = history_window  # type: ignore[method-assign]
