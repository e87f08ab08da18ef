"""Token pre-validation: parse the token and check its expiry locally.

The client does not hold the signing key, so the signature is not checked
here (the service does that); what can be known without it is whether the
token is well formed, whether it has expired, and which namespace it is for.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from syncd.auth.tokens import Claims, parse_token
from syncd.client.errors import TokenExpiredError, TokenNamespaceError, TokenParseError
from syncd.errors import ApiError


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def check_token(
    token: object,
    *,
    namespace: str | None = None,
    clock_ms: Callable[[], int] = wall_clock_ms,
) -> Claims:
    """The token's claims; :class:`TokenParseError` when it is not a syncd token,
    :class:`TokenExpiredError` when its ``expires_at`` has passed (the service
    counts a token as expired from ``expires_at`` on), :class:`TokenNamespaceError`
    when ``namespace`` is given and differs from the token's."""
    if not isinstance(token, str):
        raise TokenParseError("token must be a string")
    try:
        claims, _ = parse_token(token)
    except ApiError as exc:
        raise TokenParseError(exc.message) from None
    check_expiry(claims, clock_ms())
    if namespace is not None and claims.namespace != namespace:
        raise TokenNamespaceError(
            f"the token is for namespace {claims.namespace!r}, not {namespace!r}"
        )
    return claims


def check_expiry(claims: Claims, now_ms: int) -> None:
    if now_ms >= claims.expires_at:
        raise TokenExpiredError(
            f"the token expired at {claims.expires_at} ms (now {now_ms} ms)", claims.expires_at
        )
