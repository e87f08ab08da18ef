"""Rate limits on an injected clock: exact sliding window, Retry-After, ``rl``,
the root admin, and memory bounded under many tokens."""

from __future__ import annotations

import os
import random
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncd.auth import AdminSecret, Authenticator, Principal, RateLimiter, SigningKey
from syncd.auth.ratelimit import IDLE_SWEEP_PER_CALL
from syncd.errors import ApiError
from tests.auth.support import ROOT_SECRET, FakeClock, Mint

EXAMPLES = int(os.environ.get("AUTH_HYPOTHESIS_EXAMPLES", "150"))


def _429(auth: Authenticator, header: str) -> ApiError:
    with pytest.raises(ApiError) as ei:
        auth.authenticate(header, "demo")
    return ei.value


def test_exactly_default_limit_per_second(
    auth: Authenticator, mint: Mint, clock: FakeClock
) -> None:
    header = f"Bearer {mint(permissions={'read': ['*']})}"
    for _ in range(100):
        auth.authenticate(header, "demo")
    e = _429(auth, header)
    assert (e.status, e.code, e.message) == (429, "rate_limited", "too many requests")
    assert e.body() == {"error": "rate_limited", "message": "too many requests", "retry_after": 1}
    assert e.headers == (("Retry-After", "1"),)
    clock.advance(999)
    assert _429(auth, header).code == "rate_limited"
    clock.advance(1)  # the first second's requests leave the window together
    for _ in range(100):
        auth.authenticate(header, "demo")
    assert _429(auth, header).code == "rate_limited"


def test_window_slides(auth: Authenticator, mint: Mint, clock: FakeClock) -> None:
    header = f"Bearer {mint(permissions={'read': ['*']})}"
    for _ in range(60):
        auth.authenticate(header, "demo")
    clock.advance(500)
    for _ in range(40):
        auth.authenticate(header, "demo")
    assert _429(auth, header).code == "rate_limited"
    clock.advance(500)  # the 60 from t=0 leave; the 40 from t=500 stay
    for _ in range(60):
        auth.authenticate(header, "demo")
    assert _429(auth, header).code == "rate_limited"
    clock.advance(499)
    assert _429(auth, header).code == "rate_limited"
    clock.advance(1)  # the 40 from t=500 leave
    for _ in range(40):
        auth.authenticate(header, "demo")
    assert _429(auth, header).code == "rate_limited"


def test_refused_requests_do_not_count(auth: Authenticator, mint: Mint, clock: FakeClock) -> None:
    header = f"Bearer {mint(rules={'r': [{'p': '*'}], 'rl': 2})}"
    auth.authenticate(header, "demo")
    auth.authenticate(header, "demo")
    for _ in range(50):
        clock.advance(10)
        _429(auth, header)
    clock.advance(500)  # t=1000: both counted requests have left
    auth.authenticate(header, "demo")


def test_rl_override(auth: Authenticator, mint: Mint) -> None:
    header = f"Bearer {mint(rules={'r': [{'p': '*'}], 'rl': 3})}"
    for _ in range(3):
        auth.authenticate(header, "demo")
    assert _429(auth, header).code == "rate_limited"
    big = f"Bearer {mint(client_id=7, rules={'r': [{'p': '*'}], 'rl': 250})}"
    for _ in range(250):
        auth.authenticate(big, "demo")
    assert _429(auth, big).code == "rate_limited"


def test_default_rate_limit_parameter(key: SigningKey, clock: FakeClock, mint: Mint) -> None:
    auth = Authenticator(
        key, AdminSecret(ROOT_SECRET), default_rate_limit=5, clock_ms=clock, rate_clock_ms=clock
    )
    header = f"Bearer {mint(permissions={'read': ['*']})}"
    for _ in range(5):
        auth.authenticate(header, "demo")
    assert _429(auth, header).code == "rate_limited"
    # rl still wins over the default.
    v2 = f"Bearer {mint(rules={'r': [{'p': '*'}], 'rl': 8})}"
    for _ in range(8):
        auth.authenticate(v2, "demo")
    assert _429(auth, v2).code == "rate_limited"


def test_tokens_are_limited_separately(auth: Authenticator, mint: Mint) -> None:
    a = f"Bearer {mint(client_id=1, rules={'r': [{'p': '*'}], 'rl': 1})}"
    b = f"Bearer {mint(client_id=2, rules={'r': [{'p': '*'}], 'rl': 1})}"
    auth.authenticate(a, "demo")
    auth.authenticate(b, "demo")
    assert _429(auth, a).code == "rate_limited"


def test_rate_check_counts_websocket_ops(auth: Authenticator, mint: Mint) -> None:
    header = f"Bearer {mint(rules={'r': [{'p': '*'}], 'rl': 3})}"
    p: Principal = auth.authenticate(header, "demo")  # the upgrade: 1
    auth.rate_check(p)  # op: 2
    auth.rate_check(p)  # op: 3
    with pytest.raises(ApiError) as ei:
        auth.rate_check(p)
    assert ei.value.status == 429
    assert ei.value.headers == (("Retry-After", "1"),)


def test_root_admin_is_not_rate_limited(auth: Authenticator) -> None:
    for _ in range(1000):
        p = auth.authenticate(f"Bearer {ROOT_SECRET}", "demo")
        auth.rate_check(p)
    assert len(auth.rate_limiter) == 0


@pytest.mark.parametrize(
    ("window_ms", "wait", "retry_after"),
    [
        (1000, 0, 1),
        (1000, 999, 1),
        (5000, 100, 5),
        (5000, 3999, 2),
        (5000, 4000, 1),
        (5000, 4999, 1),
    ],
)
def test_retry_after_is_whole_seconds_at_least_one(
    window_ms: int, wait: int, retry_after: int
) -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock_ms=clock, window_ms=window_ms)
    assert limiter.hit(b"k", 1) == 0
    clock.advance(wait)
    assert limiter.hit(b"k", 1) == retry_after


def _reference_allowed(times: list[int], limit: int, window: int) -> list[bool]:
    """Sliding log by brute force: allowed iff fewer than limit allowed in (t-window, t]."""
    allowed: list[int] = []
    out = []
    for t in times:
        ok = sum(1 for a in allowed if a > t - window) < limit
        out.append(ok)
        if ok:
            allowed.append(t)
    return out


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    gaps=st.lists(st.integers(min_value=0, max_value=400), min_size=1, max_size=300),
    limit=st.integers(min_value=1, max_value=40),
)
def test_matches_exact_sliding_log(gaps: list[int], limit: int) -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock_ms=clock)
    times = []
    got = []
    for gap in gaps:
        clock.advance(gap)
        times.append(clock.now)
        got.append(limiter.hit(b"key", limit) == 0)
    assert got == _reference_allowed(times, limit, 1000)


def test_memory_bounded_with_100k_tokens_all_active() -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock_ms=clock, max_tracked=10_000)
    keys = [i.to_bytes(8, "big") for i in range(100_000)]
    tracemalloc.start()
    try:
        for k in keys:
            assert limiter.hit(k, 100) == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(limiter) == 10_000
    # ~300 bytes per tracked token; 100k untracked-bound tokens would be ~30 MB.
    assert peak < 6_000_000


def test_idle_tokens_are_forgotten_with_100k_tokens() -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock_ms=clock)  # default bound
    peak = 0
    for i in range(100_000):
        clock.advance(1)  # one new token per ms: ~1000 active at any time
        limiter.hit(i.to_bytes(8, "big"), 100)
        peak = max(peak, len(limiter))
    assert peak <= 1000 + IDLE_SWEEP_PER_CALL
    # After a quiet second, a few calls forget all of them.
    clock.advance(2000)
    calls = 0
    while len(limiter) > 1:
        limiter.hit(b"only", 100)
        calls += 1
    assert calls <= 1000 // (IDLE_SWEEP_PER_CALL - 1) + 1


def test_window_memory_is_bounded_by_the_limit() -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock_ms=clock)
    rng = random.Random(7)
    for _ in range(20_000):
        clock.advance(rng.choice((0, 0, 1, 3)))
        limiter.hit(b"busy", 50)
    window = limiter._windows[b"busy"]
    # At most `limit` live times, plus expired ones awaiting the bulk cut.
    assert len(window.times) - window.head <= 50
    assert len(window.times) <= 2 * 50 + 64


def test_evicted_active_token_starts_a_fresh_window() -> None:
    # The documented price of the hard bound: forgetting resets a window.
    clock = FakeClock()
    limiter = RateLimiter(clock_ms=clock, max_tracked=2)
    assert limiter.hit(b"a", 1) == 0
    assert limiter.hit(b"a", 1) == 1
    limiter.hit(b"b", 1)
    limiter.hit(b"c", 1)  # evicts "a"
    assert limiter.hit(b"a", 1) == 0


def test_bad_parameters() -> None:
    with pytest.raises(ValueError):
        RateLimiter(window_ms=0)
    with pytest.raises(ValueError):
        RateLimiter(max_tracked=0)
