"""What a bad token costs (docs/permissions.md#rotating-the-signing-key): a
token names no key, so one whose signature is bad is checked against every
key the server holds, the current one and at most
MAX_PREVIOUS_SIGNING_KEYS previous ones, and no more; a good token is
checked until its key is found, once, and then comes from the cache. On a
real server with the most previous keys it may hold, and the setting refused
one key past that."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from syncd.auth.permissions import V1Permissions
from syncd.auth.tokens import Claims, SigningKey, sign_claims
from syncd.config import MAX_PREVIOUS_SIGNING_KEYS, ConfigError, from_env

CURRENT = SigningKey(bytes.fromhex("d4" * 32))
PREVIOUS = tuple(SigningKey(bytes([0x40 + i]) * 32) for i in range(MAX_PREVIOUS_SIGNING_KEYS))
OTHER = SigningKey(bytes.fromhex("e5" * 32))


def bearer(key: SigningKey) -> dict[str, str]:
    now = time.time_ns() // 1_000_000
    claims = Claims("app", 7, now + 60_000, V1Permissions(("*",), ()), issued_at=now)
    return {"authorization": f"Bearer {sign_claims(claims, key)}"}


@pytest.fixture
def verifications(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The key id of every signature check the server makes (each still made)."""
    made: list[str] = []
    real = SigningKey.verify

    def counting(self: SigningKey, data: bytes, signature: bytes) -> bool:
        made.append(self.key_id)
        return real(self, data, signature)

    monkeypatch.setattr(SigningKey, "verify", counting)
    return made


async def test_a_bad_token_costs_one_check_per_key_and_no_more(
    make_server: Callable[..., Any], verifications: list[str]
) -> None:
    server = await make_server(
        signing_key=CURRENT.seed, previous_signing_keys=tuple(k.seed for k in PREVIOUS)
    )
    keys = 1 + MAX_PREVIOUS_SIGNING_KEYS
    async with httpx.AsyncClient(base_url=server.url) as client:
        bad = bearer(OTHER)
        for _ in range(2):  # refused tokens are not cached: each time again
            r = await client.get("/v1/namespaces/app/tokens/me", headers=bad)
            assert r.status_code == 401 and r.json()["error"] == "invalid_token"
        assert len(verifications) == 2 * keys
        assert verifications[:keys] == [CURRENT.key_id] + [k.key_id for k in PREVIOUS]
        verifications.clear()
        # The oldest previous key is the last one tried, and is found once.
        oldest = bearer(PREVIOUS[-1])
        for _ in range(3):
            r = await client.get("/v1/namespaces/app/tokens/me", headers=oldest)
            assert r.status_code == 200 and r.json()["key_id"] == PREVIOUS[-1].key_id
        assert len(verifications) == keys


def test_one_previous_key_past_the_limit_is_refused() -> None:
    seeds = [bytes([0x40 + i]).hex() * 32 for i in range(MAX_PREVIOUS_SIGNING_KEYS + 1)]
    settings = from_env({"SERVICE_PREVIOUS_SIGNING_KEYS": ",".join(seeds[:-1])})
    assert len(settings.previous_signing_keys) == MAX_PREVIOUS_SIGNING_KEYS
    with pytest.raises(ConfigError, match=f"at most {MAX_PREVIOUS_SIGNING_KEYS} keys"):
        from_env({"SERVICE_PREVIOUS_SIGNING_KEYS": ",".join(seeds)})
