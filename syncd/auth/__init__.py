"""Authentication and authorization: tokens, the root admin, permissions, rates.

The HTTP and WebSocket layers use :class:`Authenticator` (see its module for
the per-request calls); token issuing lives in :mod:`syncd.auth.issue`.
"""

from __future__ import annotations

from syncd.auth.admin import AdminSecret, AdminSecretError
from syncd.auth.authenticator import (
    DEFAULT_RATE_LIMIT,
    ROOT,
    TOKEN_CACHE_SIZE,
    Authenticator,
    Principal,
)
from syncd.auth.issue import (
    DEFAULT_TTL_MS,
    IssueRequest,
    describe,
    issue,
    issue_token,
    parse_issue_body,
)
from syncd.auth.permissions import Permissions, Rule, V1Permissions, V2Permissions
from syncd.auth.ratelimit import RateLimiter
from syncd.auth.tokens import (
    MAX_TOKEN_BYTES,
    Claims,
    SigningKey,
    keygen,
    parse_token,
    sign_claims,
    verify_token,
)

__all__ = [
    "DEFAULT_RATE_LIMIT",
    "DEFAULT_TTL_MS",
    "MAX_TOKEN_BYTES",
    "ROOT",
    "TOKEN_CACHE_SIZE",
    "AdminSecret",
    "AdminSecretError",
    "Authenticator",
    "Claims",
    "IssueRequest",
    "Permissions",
    "Principal",
    "RateLimiter",
    "Rule",
    "SigningKey",
    "V1Permissions",
    "V2Permissions",
    "describe",
    "issue",
    "issue_token",
    "keygen",
    "parse_issue_body",
    "parse_token",
    "sign_claims",
    "verify_token",
]
