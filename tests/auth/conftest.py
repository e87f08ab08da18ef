"""Fixtures for the auth tests: a real key, a fake clock, token minting."""

from __future__ import annotations

from typing import Any

import pytest

from syncd.auth import AdminSecret, Authenticator, SigningKey, issue_token
from tests.auth.support import ROOT_SECRET, FakeClock, Mint


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def key() -> SigningKey:
    return SigningKey.from_hex("11" * 32)


@pytest.fixture
def auth(key: SigningKey, clock: FakeClock) -> Authenticator:
    return Authenticator(key, AdminSecret(ROOT_SECRET), clock_ms=clock, rate_clock_ms=clock)


@pytest.fixture
def mint(key: SigningKey, clock: FakeClock) -> Mint:
    """``mint(client_id=42, rules={...})`` -> a token in namespace ``demo`` by default."""

    def _mint(**kw: Any) -> str:
        kw.setdefault("namespace", "demo")
        kw.setdefault("client_id", 42)
        kw.setdefault("ttl_ms", 60_000)
        kw.setdefault("now_ms", clock.now)
        return issue_token(key, **kw)

    return _mint
