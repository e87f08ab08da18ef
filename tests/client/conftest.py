"""Client tests: the real server in-process (one HTTP parser: the client does
not care which) and tokens signed with the test key."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from syncd.auth.issue import issue_token
from syncd.auth.tokens import SigningKey
from tests.conftest import SIGNING_KEY_HEX

NS = "app"
KEY = SigningKey(bytes.fromhex(SIGNING_KEY_HEX))
HOUR_MS = 3_600_000


@pytest.fixture
def http_parser() -> str:
    return "h11"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def make_token(
    client_id: int = 1,
    *,
    ns: str = NS,
    read: tuple[str, ...] = ("*",),
    write: tuple[str, ...] = ("*",),
    admin: bool = False,
    ttl_ms: int = HOUR_MS,
    key: SigningKey = KEY,
    issued_ms: int | None = None,
) -> str:
    return issue_token(
        key,
        namespace=ns,
        client_id=client_id,
        ttl_ms=ttl_ms,
        permissions={"read": list(read), "write": list(write)},
        admin=admin,
        now_ms=now_ms() if issued_ms is None else issued_ms,
    )


def limited_token(client_id: int = 4, per_second: int = 1) -> str:
    """A token that may read and write all of NS, at ``per_second`` requests
    (the token's rate limit, a V2 rule's ``rl``)."""
    return issue_token(
        KEY,
        namespace=NS,
        client_id=client_id,
        ttl_ms=HOUR_MS,
        rules={"r": [{"p": "*"}], "w": [{"p": "*"}], "rl": per_second},
        now_ms=now_ms(),
    )


@pytest.fixture
def token() -> Callable[..., str]:
    def make(*args: Any, **kwargs: Any) -> str:
        return make_token(*args, **kwargs)

    return make
