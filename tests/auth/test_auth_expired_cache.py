"""An expired token never takes a place in the verified-token cache: at a
full cache, each request with one evicted a good token before its own entry
was dropped again, so anyone holding one expired token could flush the cache
request by request and make every live token's signature be checked again
(the ~140 us the cache is there to save)."""

from __future__ import annotations

import pytest

from syncd.auth import AdminSecret, Authenticator
from syncd.errors import ApiError
from tests.auth.support import ROOT_SECRET, FakeClock, Mint
from tests.auth.test_auth_authenticator import CountingKey

CACHE = 3


def test_an_expired_token_evicts_no_live_one(clock: FakeClock, mint: Mint) -> None:
    key = CountingKey(bytes.fromhex("11" * 32))
    auth = Authenticator(
        key, AdminSecret(ROOT_SECRET), clock_ms=clock, rate_clock_ms=clock, cache_size=CACHE
    )
    expired = mint(client_id=99, ttl_ms=10, permissions={"read": ["*"]})
    clock.advance(10)
    live = [mint(client_id=i, permissions={"read": ["*"]}) for i in range(CACHE)]
    for token in live:
        auth.authenticate(f"Bearer {token}", "demo")
    assert (auth.cache_len(), key.verifications) == (CACHE, CACHE)
    for _ in range(2 * CACHE):
        with pytest.raises(ApiError) as refused:
            auth.authenticate(f"Bearer {expired}", "demo")
        assert refused.value.code == "token_expired"
    checked = key.verifications
    for token in live:
        auth.authenticate(f"Bearer {token}", "demo")
    assert key.verifications == checked, "a live token was evicted and checked again"
    assert auth.cache_len() == CACHE
