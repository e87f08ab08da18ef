"""A 401 names the scheme it wants (RFC 9110 15.5.2: a 401 MUST carry
``WWW-Authenticate``; RFC 6750 3 for Bearer), on a real server with both
parsers: ``Bearer`` when no credentials came, ``Bearer error="invalid_token"``
when the ones that came are refused (unparseable, bad signature, expired,
revoked). Every 401 lacked the header, so generic HTTP clients and proxies
saw a 401 that asks for nothing."""

from __future__ import annotations

import asyncio

import httpx

from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS, issue

READ = "/v1/namespaces/app/crdts/gc:a"
MISSING = "Bearer"
INVALID = 'Bearer error="invalid_token"'


async def test_every_401_carries_a_bearer_challenge(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        expired = await issue(client, ttl_ms=1)
        revoked = await issue(client, client_id=8)
        r = await client.post(
            "/v1/namespaces/app/revocations", json={"client_id": 8}, headers=ADMIN_HEADERS
        )
        assert r.status_code == 200, r.text
        await asyncio.sleep(0.01)
        cases = [
            ("GET", READ, {}, "missing_token", MISSING),
            ("GET", READ, {"authorization": "Basic YTpi"}, "invalid_token", INVALID),
            ("GET", READ, {"authorization": "Bearer garbage.token"}, "invalid_token", INVALID),
            ("GET", READ, expired, "token_expired", INVALID),
            ("GET", READ, revoked, "token_revoked", INVALID),
            ("HEAD", READ, {}, None, MISSING),
            ("POST", "/v1/namespaces/app/crdts/gc:a/ops", {}, "missing_token", MISSING),
            ("GET", READ + "/events?token=garbage", {}, "invalid_token", INVALID),
            ("GET", "/v1/namespaces/app/ws", {}, "missing_token", MISSING),
            ("POST", "/v1/admin/backup", {}, "missing_token", MISSING),
        ]
        for method, path, headers, code, challenge in cases:
            r = await client.request(method, path, headers=headers)
            assert r.status_code == 401, (method, path, r.text)
            if code is not None:
                assert r.json()["error"] == code
            assert r.headers.get_list("www-authenticate") == [challenge], (method, path)


async def test_other_errors_carry_no_challenge(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        other = await issue(client, ns="other")
        for r in (
            await client.get(READ, headers=other),  # 403: the token is fine, the grant is not
            await client.get(READ, headers=ADMIN_HEADERS),  # 404
            await client.get("/health/live"),
        ):
            assert "www-authenticate" not in r.headers, r.status_code
