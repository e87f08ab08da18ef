"""A token issued by a token ends no later than its issuer, on a real server
(docs/permissions.md#issuing-tokens): ``ttl_ms`` past the issuer's
``expires_at`` is 400 on both issue routes, an omitted one is the default cut
to what is left of the issuer, and the bound holds down a chain of admins.
The root admin, which does not expire, issues up to the maximum."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from tests.http.support import ADMIN_HEADERS

ISSUER_TTL_MS = 1500
OUTLIVES = "may not outlive the token that issued it"


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_a_token_cannot_outlive_the_token_that_issued_it(server: Any) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:

        async def issue(headers: dict[str, str], path: str, body: dict[str, Any]) -> str:
            r = await client.post(path, json=body, headers=headers)
            assert r.status_code == 200, r.text
            return str(r.json()["token"])

        async def expires_at(token: str) -> int:
            r = await client.get("/v1/namespaces/app/tokens/me", headers=bearer(token))
            assert r.status_code == 200, r.text
            return int(r.json()["expires_at"])

        tokens = "/v1/namespaces/app/tokens"
        admin = await issue(
            ADMIN_HEADERS,
            tokens,
            {"client_id": 1, "ttl_ms": ISSUER_TTL_MS, "permissions": {"admin": True}},
        )
        admin_ends = await expires_at(admin)
        reader = {"client_id": 2, "permissions": {"read": ["*"]}}

        # Asked for longer than the issuer lives: refused on both routes, as a
        # ttl_ms past SERVICE_MAX_TOKEN_TTL_MS is.
        for path, extra in ((tokens, {}), ("/v1/tokens", {"namespace": "app"})):
            r = await client.post(
                path, json={**reader, **extra, "ttl_ms": 60_000}, headers=bearer(admin)
            )
            assert r.status_code == 400, r.text
            assert r.json()["error"] == "bad_request"
            message = r.json()["message"]
            assert message.startswith("ttl_ms: must be at most "), message
            assert OUTLIVES in message, message
            # The bound it names is what is left of the issuer, at most.
            left = int(message.removeprefix("ttl_ms: must be at most ").split(":")[0])
            assert 0 < left <= ISSUER_TTL_MS

        # Omitted: the one-hour default, cut to the issuer's end.
        child = await issue(bearer(admin), tokens, reader)
        assert await expires_at(child) == admin_ends
        # Within the issuer's life: as asked.
        short = await issue(bearer(admin), tokens, {**reader, "ttl_ms": 200})
        assert await expires_at(short) < admin_ends

        # Down a chain: an admin the admin issued is bound by the first one's end.
        second = await issue(
            bearer(admin), tokens, {"client_id": 3, "permissions": {"admin": True}}
        )
        assert await expires_at(second) == admin_ends
        r = await client.post(tokens, json={**reader, "ttl_ms": 60_000}, headers=bearer(second))
        assert r.status_code == 400 and OUTLIVES in r.json()["message"], r.text
        grandchild = await issue(bearer(second), "/v1/tokens", {**reader, "namespace": "app"})
        assert await expires_at(grandchild) == admin_ends

        # The root admin does not expire: it issues past the admin's end.
        long = await issue(ADMIN_HEADERS, tokens, {**reader, "ttl_ms": 60_000})
        assert await expires_at(long) > admin_ends

        # Once the issuer has expired, so has everything it issued.
        await asyncio.sleep(max(0.0, admin_ends / 1000 - time.time()) + 0.05)
        for token in (admin, child, second, grandchild):
            r = await client.get("/v1/namespaces/app/crdts/gc:x", headers=bearer(token))
            assert r.status_code == 401 and r.json()["error"] == "token_expired", r.text
        r = await client.get("/v1/namespaces/app/tokens/me", headers=bearer(long))
        assert r.status_code == 200, r.text
