"""Issuing tokens: the two admin endpoints' bodies and ``tokens/me`` (``syncd token``,
in :mod:`syncd.cli.token`, goes through the same checks).

- ``POST /v1/namespaces/:ns/tokens``: ``{client_id, ttl_ms?, permissions |
  rules}``; ``permissions`` ``{read, write, admin?}`` makes a V1 token, ``rules``
  ``{r, w, rl?}`` a V2 one; both or neither is a bad request.
- ``POST /v1/tokens``: ``{namespace, client_id, permissions: {read, write,
  admin}, ttl_ms?}``, always V1.

Unknown body fields are refused rather than ignored: a typo such as
``"permision"`` must not silently issue a token with less (or more) than meant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from syncd.auth.authenticator import Principal
from syncd.auth.permissions import (
    Permissions,
    PermissionsError,
    V1Permissions,
    V2Permissions,
    parse_v1,
    parse_v2,
)
from syncd.auth.tokens import MAX_CLIENT_ID, Claims, SigningKey, sign_claims
from syncd.crdt.validate import json_int
from syncd.errors import bad_request
from syncd.ids import check_namespace

DEFAULT_TTL_MS = 3_600_000
"""Token lifetime when ``ttl_ms`` is omitted: one hour."""

DEFAULT_MAX_TTL_MS = 30 * 24 * 3600 * 1000
"""``SERVICE_MAX_TOKEN_TTL_MS`` default: 30 days."""

_NS_BODY_KEYS = frozenset({"client_id", "ttl_ms", "permissions", "rules"})
_GLOBAL_BODY_KEYS = frozenset({"namespace", "client_id", "ttl_ms", "permissions"})


@dataclass(frozen=True, slots=True)
class IssueRequest:
    namespace: str
    client_id: int
    ttl_ms: int
    permissions: Permissions


def _int_field(body: Mapping[str, Any], name: str) -> int:
    value = json_int(body[name])
    if value is None:
        raise bad_request(f"{name} must be an integer")
    return value


def _client_id(body: Mapping[str, Any]) -> int:
    if "client_id" not in body:
        raise bad_request("client_id is required")
    client_id = _int_field(body, "client_id")
    if not 0 <= client_id <= MAX_CLIENT_ID:
        raise bad_request(f"client_id must be from 0 to {MAX_CLIENT_ID}")
    return client_id


def _ttl_ms(body: Mapping[str, Any], max_ttl_ms: int) -> int:
    if "ttl_ms" not in body or body["ttl_ms"] is None:
        return min(DEFAULT_TTL_MS, max_ttl_ms)
    ttl = _int_field(body, "ttl_ms")
    if ttl <= 0:
        raise bad_request("ttl_ms must be positive")
    if ttl > max_ttl_ms:
        raise bad_request(f"ttl_ms must be at most {max_ttl_ms}")
    return ttl


def parse_issue_body(body: Any, ns: str | None, max_ttl_ms: int) -> IssueRequest:
    """Validate a token-issue body: ``ns`` is the path namespace of
    ``POST /v1/namespaces/:ns/tokens``, None for ``POST /v1/tokens``."""
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object")
    allowed = _NS_BODY_KEYS if ns is not None else _GLOBAL_BODY_KEYS
    extra = sorted(str(k) for k in body if k not in allowed)
    if extra:
        raise bad_request(f"unknown field(s): {', '.join(extra)}")
    if ns is None:
        namespace = body.get("namespace")
        if not isinstance(namespace, str):
            raise bad_request("namespace is required and must be a string")
    else:
        namespace = ns
    check_namespace(namespace)
    client_id = _client_id(body)
    ttl_ms = _ttl_ms(body, max_ttl_ms)
    has_v1 = "permissions" in body
    has_v2 = "rules" in body
    if has_v1 == has_v2:
        raise bad_request("give exactly one of permissions (V1) or rules (V2)")
    permissions: Permissions
    try:
        if has_v1:
            permissions = parse_v1(body["permissions"])
        else:
            permissions = parse_v2(body["rules"], require_v=False, what="rules", json_body=True)
    except PermissionsError as e:
        raise bad_request(str(e)) from None
    return IssueRequest(namespace, client_id, ttl_ms, permissions)


def issue(signing_key: SigningKey, request: IssueRequest, now_ms: int) -> str:
    """The token for a validated request, stamped ``issued_at`` = ``now_ms``
    (what revocations compare); 400 if it would be over the size cap."""
    claims = Claims(
        request.namespace,
        request.client_id,
        now_ms + request.ttl_ms,
        request.permissions,
        issued_at=now_ms,
    )
    try:
        return sign_claims(claims, signing_key)
    except ValueError as e:
        raise bad_request(f"permissions too large: {e}") from None


def issue_token(
    signing_key: SigningKey,
    *,
    namespace: str,
    client_id: int,
    ttl_ms: int,
    permissions: Mapping[str, Any] | V1Permissions | None = None,
    rules: Mapping[str, Any] | V2Permissions | None = None,
    admin: bool = False,
    now_ms: int,
) -> str:
    """Issue a token (tests, the CLI, trusted code). ``permissions`` is a V1
    ``{read, write, admin?}`` map, ``rules`` a V2 ``{r, w, rl?}`` map; with
    neither, a V1 token with empty lists. ``admin`` sets the V1 admin flag."""
    if permissions is not None and rules is not None:
        raise bad_request("give permissions (V1) or rules (V2), not both")
    perms: Permissions
    try:
        if rules is not None:
            if admin:
                raise bad_request("admin is a V1 permission; V2 rules have no admin flag")
            perms = (
                rules
                if isinstance(rules, V2Permissions)
                else parse_v2(dict(rules), require_v=False, what="rules")
            )
        else:
            v1 = permissions if permissions is not None else {}
            perms = v1 if isinstance(v1, V1Permissions) else parse_v1(dict(v1))
            if admin and not perms.admin:
                perms = V1Permissions(perms.read, perms.write, admin=True)
    except PermissionsError as e:
        raise bad_request(str(e)) from None
    check_namespace(namespace)
    if type(client_id) is not int or not 0 <= client_id <= MAX_CLIENT_ID:
        raise bad_request(f"client_id must be from 0 to {MAX_CLIENT_ID}")
    if type(ttl_ms) is not int or ttl_ms <= 0:
        raise bad_request("ttl_ms must be a positive integer")
    return issue(signing_key, IssueRequest(namespace, client_id, ttl_ms, perms), now_ms)


def describe(principal: Principal) -> dict[str, Any]:
    """The ``GET /v1/namespaces/:ns/tokens/me`` answer: the claims, and the id
    of the key that signed the token (``issued_at`` is 0 for a token from
    before that claim existed)."""
    if principal.root or principal.permissions is None:
        return {"admin": True, "root": True}
    return {
        "namespace": principal.namespace,
        "client_id": principal.client_id,
        "expires_at": principal.expires_at,
        "issued_at": principal.issued_at,
        "permissions": principal.permissions.to_map(),
        "key_id": principal.key_id,
    }
