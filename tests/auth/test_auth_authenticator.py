"""Request-level authentication: the header, the root admin, the verified-token
cache, expiry on every call, the namespace."""

from __future__ import annotations

import pytest

from syncd.auth import ROOT, AdminSecret, Authenticator, SigningKey
from syncd.errors import ApiError
from tests.auth.support import ROOT_SECRET, FakeClock, Mint


class CountingKey(SigningKey):
    """A real key that counts signature checks."""

    __slots__ = ("verifications",)

    def __init__(self, seed: bytes) -> None:
        super().__init__(seed)
        self.verifications = 0

    def verify(self, data: bytes, signature: bytes) -> bool:
        self.verifications += 1
        return super().verify(data, signature)


def refused(
    auth: Authenticator, authorization: str | None, ns: str | None = "demo", **kw: str
) -> ApiError:
    with pytest.raises(ApiError) as ei:
        auth.authenticate(authorization, ns, **kw)
    return ei.value


def test_missing_token(auth: Authenticator) -> None:
    e = refused(auth, None)
    assert (e.status, e.code) == (401, "missing_token")


@pytest.mark.parametrize(
    "header",
    ["", "Bearer", "Bearer ", "Bearer    ", "Basic dXNlcjpwYXNz", "Token abc", "abc", "Bearerabc"],
)
def test_not_a_bearer_header(auth: Authenticator, header: str) -> None:
    e = refused(auth, header)
    assert (e.status, e.code) == (401, "invalid_token")


def test_scheme_is_case_insensitive(auth: Authenticator, mint: Mint) -> None:
    token = mint(permissions={"read": ["*"]})
    for scheme in ("Bearer", "bearer", "BEARER"):
        assert auth.authenticate(f"{scheme} {token}", "demo").client_id == 42
    assert auth.authenticate(f"Bearer  {token} ", "demo").client_id == 42


def test_query_token(auth: Authenticator, mint: Mint) -> None:
    token = mint(permissions={"read": ["*"]})
    assert auth.authenticate(None, "demo", query_token=token).client_id == 42
    # The header wins when both are given.
    e = refused(auth, "Bearer nope", query_token=token)
    assert e.code == "invalid_token"
    assert refused(auth, None, query_token="").code == "invalid_token"
    assert refused(auth, None, query_token="garbage").code == "invalid_token"


def test_root_admin(auth: Authenticator) -> None:
    for ns in ("demo", "other", None):
        p = auth.authenticate(f"Bearer {ROOT_SECRET}", ns)
        assert p is ROOT
        assert p.root and p.namespace is None and p.rate_limit is None and p.version == 0
    assert auth.authenticate(None, "demo", query_token=ROOT_SECRET) is ROOT
    assert refused(auth, f"Bearer {ROOT_SECRET}x").code == "invalid_token"


def test_signature_checked_once_per_token(clock: FakeClock, mint: Mint) -> None:
    key = CountingKey(bytes.fromhex("11" * 32))
    auth = Authenticator(key, AdminSecret(ROOT_SECRET), clock_ms=clock, rate_clock_ms=clock)
    token = mint(permissions={"read": ["*"]})
    first = auth.authenticate(f"Bearer {token}", "demo")
    for _ in range(20):
        assert auth.authenticate(f"Bearer {token}", "demo") is first
    assert key.verifications == 1
    # Bad tokens are never cached: each costs a check and is refused again.
    bad = token[:-2] + ("AA" if token[-2:] != "AA" else "BA")
    for _ in range(3):
        assert refused(auth, f"Bearer {bad}").code == "invalid_token"
    assert key.verifications == 4
    assert auth.cache_len() == 1


def test_cache_is_bounded_lru(key: SigningKey, clock: FakeClock, mint: Mint) -> None:
    auth = Authenticator(
        key, AdminSecret(ROOT_SECRET), clock_ms=clock, rate_clock_ms=clock, cache_size=3
    )
    tokens = [mint(client_id=i, permissions={"read": ["*"]}) for i in range(5)]
    for t in tokens:
        auth.authenticate(f"Bearer {t}", "demo")
        assert auth.cache_len() <= 3
    assert auth.cache_len() == 3
    # Evicted tokens still work (verified again).
    assert auth.authenticate(f"Bearer {tokens[0]}", "demo").client_id == 0


def test_cache_disabled(clock: FakeClock, mint: Mint) -> None:
    key = CountingKey(bytes.fromhex("11" * 32))
    auth = Authenticator(
        key, AdminSecret(ROOT_SECRET), clock_ms=clock, rate_clock_ms=clock, cache_size=0
    )
    token = mint(permissions={"read": ["*"]})
    for _ in range(3):
        auth.authenticate(f"Bearer {token}", "demo")
    assert key.verifications == 3
    assert auth.cache_len() == 0


def test_expiry_checked_on_every_call(auth: Authenticator, mint: Mint, clock: FakeClock) -> None:
    token = mint(ttl_ms=100, permissions={"read": ["*"]})
    p = auth.authenticate(f"Bearer {token}", "demo")
    assert p.expires_at == clock.now + 100
    clock.advance(99)
    auth.authenticate(f"Bearer {token}", "demo")
    auth.check_expiry(p)
    clock.advance(1)
    e = refused(auth, f"Bearer {token}")
    assert (e.status, e.code, e.message) == (401, "token_expired", "token expired")
    with pytest.raises(ApiError) as ei:
        auth.check_expiry(p)
    assert ei.value.code == "token_expired"
    assert auth.cache_len() == 0


def test_namespace_checked_after_expiry(auth: Authenticator, mint: Mint, clock: FakeClock) -> None:
    token = mint(ttl_ms=10, permissions={"read": ["*"]})
    assert refused(auth, f"Bearer {token}", ns="other").code == "forbidden"
    clock.advance(10)
    assert refused(auth, f"Bearer {token}", ns="other").code == "token_expired"


def test_no_namespace_route(auth: Authenticator, mint: Mint) -> None:
    p = auth.authenticate(f"Bearer {mint(admin=True)}", None)
    assert p.namespace == "demo"
    assert auth.is_admin(p, "demo")


def test_principal_repr_hides_the_signature(auth: Authenticator, mint: Mint) -> None:
    p = auth.authenticate(f"Bearer {mint(permissions={'read': ['*']})}", "demo")
    assert p.rate_key is not None
    assert repr(p.rate_key) not in repr(p)


def test_constructor_limits(key: SigningKey) -> None:
    with pytest.raises(ValueError):
        Authenticator(key, AdminSecret(ROOT_SECRET), default_rate_limit=0)
    with pytest.raises(ValueError):
        Authenticator(key, AdminSecret(ROOT_SECRET), cache_size=-1)
