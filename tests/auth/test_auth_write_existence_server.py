"""Restore and revert do not tell a token which ids exist, on a real server.

Both need write permission for the id (docs/http-api.md). Their handlers
looked the CRDT up (404 when there is none) before checking that permission,
so a token of the namespace with no permission at all, or with a rule that
allows no op, got 404 for an id that does not exist and 403 for one that
does: an oracle for the ids it may not read, which every read route and the
listing hide (both answer 403). Now the permission that needs no type comes
first (``Authenticator.check_may_write``)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.http.support import ADMIN_HEADERS, issue, op

ROUTES = [("restore", {"seq": 0}), ("revert", {"client_id": 0})]


@pytest.mark.parametrize(
    "rules",
    [
        {"r": [{"p": "gc:*"}], "w": []},  # no write permission at all
        {"r": [], "w": [{"p": "lw:*", "o": 0}, {"p": "or:*"}]},  # o: 0 on lw:
    ],
)
async def test_an_id_it_may_not_write_is_403_whether_or_not_it_exists(
    server: Any, rules: dict[str, Any]
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await op(client, ADMIN_HEADERS, "lw:exists", {"op": "set", "value": 1})
        assert r.status_code == 200, r.text
        token = await issue(client, client_id=9, rules=rules)
        for crdt_id in ("lw:exists", "lw:missing"):
            for route, body in ROUTES:
                path = f"/v1/namespaces/app/crdts/{crdt_id}/{route}"
                r = await client.post(path, json=body, headers=token)
                assert r.status_code == 403, (path, r.status_code, r.text)
                assert r.json()["error"] == "forbidden"


async def test_a_writer_still_gets_404_for_an_id_that_does_not_exist(server: Any) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        token = await issue(client, client_id=9, read=[], write=["*"])
        for route, body in ROUTES:
            r = await client.post(
                f"/v1/namespaces/app/crdts/lw:missing/{route}", json=body, headers=token
            )
            assert r.status_code == 404, r.text
            assert r.json()["error"] == "not_found"
