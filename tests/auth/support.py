"""Helpers shared by the auth tests."""

from __future__ import annotations

from collections.abc import Callable

T0 = 1_700_000_000_000
ROOT_SECRET = "root-secret-for-tests-0123456789"

Mint = Callable[..., str]


class FakeClock:
    """Milliseconds that move only when a test moves them."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms
