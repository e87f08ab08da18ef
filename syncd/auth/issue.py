"""Issuing tokens: the two admin endpoints' bodies and ``tokens/me`` (``syncd token``,
in :mod:`syncd.cli.token`, goes through the same checks).

- ``POST /v1/namespaces/:ns/tokens``: ``{client_id, ttl_ms?, permissions |
  rules}``; ``permissions`` ``{read, write, admin?}`` makes a V1 token, ``rules``
  ``{r, w, rl?}`` a V2 one; both or neither is a bad request.
- ``POST /v1/tokens``: ``{namespace, client_id, permissions: {read, write,
  admin}, ttl_ms?}``, always V1.

Unknown body fields are refused rather than ignored: a typo such as
``"permision"`` must not silently issue a token with less (or more) than meant.
For the same reason permissions or rules that grant nothing at all are refused
(see :func:`_grants_anything`). Messages name the field first (``client_id:
...``), as every validation message of the API does.

A token issued by a token ends no later than its issuer (``issuer_expires_at``
of :func:`parse_issue_body`), as a macaroon's or a UCAN's child does: else a
short-lived admin token could issue itself longer-lived successors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from syncd.auth.authenticator import Principal, token_expired
from syncd.auth.permissions import (
    Permissions,
    PermissionsError,
    Rule,
    V1Permissions,
    V2Permissions,
    parse_v1,
    parse_v2,
)
from syncd.auth.tokens import MAX_CLIENT_ID, Claims, SigningKey, sign_claims
from syncd.crdt.types import TYPES
from syncd.crdt.validate import json_int
from syncd.errors import bad_request
from syncd.ids import check_namespace

DEFAULT_TTL_MS = 3_600_000
"""Token lifetime when ``ttl_ms`` is omitted: one hour."""

DEFAULT_MAX_TTL_MS = 30 * 24 * 3600 * 1000
"""``SERVICE_MAX_TOKEN_TTL_MS`` default: 30 days."""

_NS_BODY_KEYS = frozenset({"client_id", "ttl_ms", "permissions", "rules"})
_GLOBAL_BODY_KEYS = frozenset({"namespace", "client_id", "ttl_ms", "permissions"})


def _every_op_bit() -> int:
    """The OR of every op bit of every type: a mask without any of them allows
    no op at all (``"o": 0``, or only bits above the richest type's)."""
    bits = 0
    for cls in TYPES.values():
        for bit in cls.OPS.values():
            bits |= bit
    return bits


EVERY_OP_BIT: Final = _every_op_bit()

NOTHING_V1: Final = "it needs a read or write glob, or admin: true"
NOTHING_V2: Final = (
    "it needs an r rule, or a w rule whose o allows some op; a rule whose e (ms since "
    'the epoch) has passed does not count, nor one after a "*" w rule that allows no op'
)
"""What the 400 for permissions or rules that grant nothing says is missing."""


@dataclass(frozen=True, slots=True)
class IssueRequest:
    namespace: str
    client_id: int
    ttl_ms: int
    permissions: Permissions


def _int_field(body: Mapping[str, Any], name: str) -> int:
    value = json_int(body[name])
    if value is None:
        raise bad_request(f"{name}: must be an integer")
    return value


def _client_id(body: Mapping[str, Any]) -> int:
    if "client_id" not in body:
        raise bad_request(f"client_id: an integer from 0 to {MAX_CLIENT_ID} is required")
    client_id = json_int(body["client_id"])
    if client_id is None or not 0 <= client_id <= MAX_CLIENT_ID:
        raise bad_request(f"client_id: must be an integer from 0 to {MAX_CLIENT_ID}")
    return client_id


def _ttl_ms(body: Mapping[str, Any], max_ttl_ms: int, issuer_left_ms: int | None) -> int:
    """``ttl_ms``, or the default: at most ``max_ttl_ms``, and at most
    ``issuer_left_ms`` (what is left of the issuing token's life) when a token
    issues. An omitted ``ttl_ms`` is bounded by both, as the default always
    was by the maximum; one given past either is refused, not shortened: the
    caller asked for a lifetime it would not get."""
    default = min(DEFAULT_TTL_MS, max_ttl_ms)
    if issuer_left_ms is not None:
        default = min(default, issuer_left_ms)
    if "ttl_ms" not in body or body["ttl_ms"] is None:
        return default
    ttl = _int_field(body, "ttl_ms")
    if ttl <= 0:
        raise bad_request("ttl_ms: must be positive")
    if ttl > max_ttl_ms:
        raise bad_request(f"ttl_ms: must be at most {max_ttl_ms} (SERVICE_MAX_TOKEN_TTL_MS)")
    if issuer_left_ms is not None and ttl > issuer_left_ms:
        raise bad_request(
            f"ttl_ms: must be at most {issuer_left_ms}: the issuing token expires then"
            " (its expires_at), and a token may not outlive the token that issued it"
        )
    return ttl


def parse_issue_body(
    body: Any,
    ns: str | None,
    max_ttl_ms: int,
    now_ms: int,
    *,
    issuer_expires_at: int | None = None,
) -> IssueRequest:
    """Validate a token-issue body: ``ns`` is the path namespace of
    ``POST /v1/namespaces/:ns/tokens``, None for ``POST /v1/tokens``;
    ``now_ms``: the issue time, which rule expiries (``e``) are compared to;
    ``issuer_expires_at``: the ``expires_at`` of the token that issues (None:
    the root admin or the signing key, which do not expire), past which the
    new token may not live (:func:`_ttl_ms`)."""
    if not isinstance(body, dict):
        raise bad_request("body: must be a JSON object")
    allowed = _NS_BODY_KEYS if ns is not None else _GLOBAL_BODY_KEYS
    extra = sorted(str(k) for k in body if k not in allowed)
    if extra:
        raise bad_request(f"unknown field(s): {', '.join(extra)}")
    if ns is None:
        namespace = body.get("namespace")
        if not isinstance(namespace, str):
            raise bad_request("namespace: a string is required")
    else:
        namespace = ns
    check_namespace(namespace)
    client_id = _client_id(body)
    issuer_left_ms = None
    if issuer_expires_at is not None:
        issuer_left_ms = issuer_expires_at - now_ms
        if issuer_left_ms <= 0:  # it expired since it was authenticated
            raise token_expired()
    ttl_ms = _ttl_ms(body, max_ttl_ms, issuer_left_ms)
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
    if not _grants_anything(permissions, now_ms):
        raise bad_request(
            f"{'permissions' if has_v1 else 'rules'}: the token would grant nothing: "
            + (NOTHING_V1 if has_v1 else NOTHING_V2)
        )
    return IssueRequest(namespace, client_id, ttl_ms, permissions)


def _grants_anything(permissions: Permissions, now_ms: int) -> bool:
    """Whether a token with ``permissions`` may do anything at all: read some
    id or make some op. One that may not is always a slip (a list left empty,
    an ``e`` in seconds where ms are meant, ``"o": 0`` on the only rule), and
    it would be issued silently, to fail only when used, with 403s that say
    nothing of why.

    A narrow token is no slip: one glob, one read rule, or one write rule
    whose mask holds any op's bit grants something, whether or not an id it
    matches exists yet. Only the pattern ``""`` matches no id at all (ids
    have at least one character)."""
    if isinstance(permissions, V1Permissions):
        return permissions.admin or any(permissions.read) or any(permissions.write)
    return _rules_grant(permissions.read, None, now_ms) or _rules_grant(
        permissions.write, EVERY_OP_BIT, now_ms
    )


def _rules_grant(rules: tuple[Rule, ...], op_bits: int | None, now_ms: int) -> bool:
    """Whether some rule of ``rules`` decides for some id at or after ``now_ms``
    and grants: any rule for reads (``op_bits`` None: masks do not apply),
    for writes one whose mask holds some op's bit. The first matching rule
    decides, so after a rule that matches every id for good (a pattern of
    stars, no ``e``) no later rule ever decides."""
    for rule in rules:
        if rule.expires_at is not None and rule.expires_at <= now_ms:
            continue  # skipped from now on, as if it were not there
        if rule.pattern and (op_bits is None or rule.mask is None or rule.mask & op_bits):
            return True
        if rule.expires_at is None and rule.pattern and not rule.pattern.strip("*"):
            return False
    return False


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
        raise bad_request(f"client_id: must be an integer from 0 to {MAX_CLIENT_ID}")
    if type(ttl_ms) is not int or ttl_ms <= 0:
        raise bad_request("ttl_ms: must be a positive integer")
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
