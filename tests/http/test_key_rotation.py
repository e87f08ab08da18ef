"""Key rotation on a real server (docs/operations.md#rotating-the-signing-key):
tokens signed with a key in SERVICE_PREVIOUS_SIGNING_KEYS still verify,
``tokens/me`` names the key that signed each token, new tokens are signed
with SERVICE_SIGNING_KEY, and a token of any other key is refused."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from syncd.auth.permissions import V1Permissions
from syncd.auth.tokens import Claims, SigningKey, sign_claims
from tests.conftest import RunningServer
from tests.http.support import issue, op

OLD = SigningKey(bytes.fromhex("a1" * 32))
NEW = SigningKey(bytes.fromhex("b2" * 32))
OTHER = SigningKey(bytes.fromhex("c3" * 32))


def _token(key: SigningKey, client_id: int = 7) -> dict[str, str]:
    now = time.time_ns() // 1_000_000
    claims = Claims("app", client_id, now + 60_000, V1Permissions(("*",), ("*",)), issued_at=now)
    return {"authorization": f"Bearer {sign_claims(claims, key)}"}


async def test_tokens_of_the_previous_key_verify_and_name_it(
    make_server: Callable[..., Any],
) -> None:
    server: RunningServer = await make_server(
        signing_key=NEW.seed, previous_signing_keys=(OLD.seed,)
    )
    async with httpx.AsyncClient(base_url=server.url) as client:
        old = _token(OLD)
        r = await client.get("/v1/namespaces/app/tokens/me", headers=old)
        assert r.status_code == 200 and r.json()["key_id"] == OLD.key_id
        assert (await op(client, old, "gc:k", {"op": "increment"})).status_code == 200
        # What the server issues now is signed with the current key.
        fresh = await issue(client)
        r = await client.get("/v1/namespaces/app/tokens/me", headers=fresh)
        assert r.json()["key_id"] == NEW.key_id != OLD.key_id
        # A key the server does not hold: refused.
        r = await client.get("/v1/namespaces/app/tokens/me", headers=_token(OTHER))
        assert r.status_code == 401 and r.json()["error"] == "invalid_token"


async def test_dropping_the_previous_key_ends_its_tokens(make_server: Callable[..., Any]) -> None:
    server: RunningServer = await make_server(signing_key=NEW.seed)
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.get("/v1/namespaces/app/tokens/me", headers=_token(OLD))
        assert r.status_code == 401 and r.json()["error"] == "invalid_token"
        r = await client.get("/v1/namespaces/app/tokens/me", headers=_token(NEW))
        assert r.status_code == 200 and r.json()["key_id"] == NEW.key_id
