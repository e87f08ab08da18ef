"""The token-issue and revocation routes on a real server: permissions or
rules that grant nothing are 400 with a JSON error naming the field, narrow
ones are issued, and every refusal's message is ``field: problem``
(docs/permissions.md#issuing-what-is-refused)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.http.support import ADMIN_HEADERS

LIMIT = 2**53 - 1


@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_issue_and_revoke_refusals_on_a_real_server(server: Any) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS) as client:

        async def refused(path: str, body: Any, message: str) -> None:
            r = await client.post(path, json=body)
            assert r.status_code == 400, (body, r.text)
            assert r.json() == {"error": "bad_request", "message": message}, body

        nothing_v1 = "permissions: the token would grant nothing: it needs a read or write glob"
        for path, extra in (
            ("/v1/namespaces/app/tokens", {}),
            ("/v1/tokens", {"namespace": "app"}),
        ):
            for permissions in ({}, {"read": [], "write": [], "admin": False}):
                r = await client.post(
                    path, json={**extra, "client_id": 3, "permissions": permissions}
                )
                assert r.status_code == 400 and r.json()["error"] == "bad_request", r.text
                assert r.json()["message"].startswith(nothing_v1), r.text
            r = await client.post(
                path, json={**extra, "client_id": 3, "permissions": {"read": ["gc:one"]}}
            )
            assert r.status_code == 200 and r.json()["token"], r.text
        for rules in ({}, {"r": [], "w": []}, {"w": [{"p": "*", "o": 0}]}):
            r = await client.post(
                "/v1/namespaces/app/tokens", json={"client_id": 3, "rules": rules}
            )
            assert r.status_code == 400, r.text
            assert r.json()["message"].startswith("rules: the token would grant nothing: ")
        narrow = {"client_id": 3, "rules": {"w": [{"p": "gc:*", "o": 0}, {"p": "or:c", "o": 1}]}}
        r = await client.post("/v1/namespaces/app/tokens", json=narrow)
        assert r.status_code == 200, r.text

        tokens = "/v1/namespaces/app/tokens"
        await refused(tokens, [], "body: must be a JSON object")
        await refused(
            tokens,
            {"permissions": {"read": ["*"]}},
            f"client_id: an integer from 0 to {LIMIT} is required",
        )
        await refused(
            tokens,
            {"client_id": -1, "permissions": {"read": ["*"]}},
            f"client_id: must be an integer from 0 to {LIMIT}",
        )
        await refused(
            "/v1/tokens",
            {"client_id": 1, "permissions": {"read": ["*"]}},
            "namespace: a string is required",
        )
        revocations = "/v1/namespaces/app/revocations"
        await refused(revocations, {}, f"client_id: an integer from 0 to {LIMIT} is required")
        await refused(
            revocations, {"client_id": "7"}, f"client_id: must be an integer from 0 to {LIMIT}"
        )
        r = await client.delete(f"{revocations}/x7")
        assert r.status_code == 400, r.text
        assert r.json() == {
            "error": "bad_request",
            "message": "client_id: must be a decimal integer",
        }
