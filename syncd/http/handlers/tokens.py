"""Token routes (docs/permissions.md#issuing-tokens): issue (admin) and inspect (the caller's own).

A token issued by a token (a V1 namespace admin's) expires no later than the
token that issued it (``issuer_expires_at``); the root admin is not a token
and issues up to ``SERVICE_MAX_TOKEN_TTL_MS``."""

from __future__ import annotations

import time

from syncd.auth.authenticator import Authenticator
from syncd.auth.issue import describe, issue, parse_issue_body
from syncd.auth.tokens import SigningKey
from syncd.http.handlers.guards import admin_guard, authenticated, own_admin_guard
from syncd.http.request import Request
from syncd.http.response import Response, json_response
from syncd.http.router import Router
from syncd.ids import check_namespace


def register(
    router: Router,
    *,
    auth: Authenticator,
    signing_key: SigningKey,
    json_max_depth: int,
    max_token_ttl_ms: int,
) -> None:

    def issue_in_namespace(request: Request) -> Response:
        ns = check_namespace(request.params["ns"])
        principal = authenticated(auth, request, ns)
        auth.check_admin(principal, ns)
        body = request.json(json_max_depth)
        now_ms = time.time_ns() // 1_000_000
        parsed = parse_issue_body(
            body, ns, max_token_ttl_ms, now_ms, issuer_expires_at=principal.expires_at
        )
        return json_response({"token": issue(signing_key, parsed, now_ms)})

    def issue_agent(request: Request) -> Response:
        principal = authenticated(auth, request, None)
        # Admin of its own namespace first, before the body is read: a token
        # that may issue nowhere is 403 whatever it sends, as on the other
        # route, and learns nothing from the body's validation.
        auth.check_admin(principal, principal.namespace)
        body = request.json(json_max_depth)
        now_ms = time.time_ns() // 1_000_000
        parsed = parse_issue_body(
            body, None, max_token_ttl_ms, now_ms, issuer_expires_at=principal.expires_at
        )
        auth.check_admin(principal, parsed.namespace)
        return json_response({"token": issue(signing_key, parsed, now_ms)})

    def me(request: Request) -> Response:
        ns = check_namespace(request.params["ns"])
        principal = auth.authenticate(request.headers.get("authorization"), ns)
        return json_response(describe(principal))

    router.add("POST", "/v1/namespaces/{ns}/tokens", issue_in_namespace, admin_guard(auth))
    router.add("POST", "/v1/tokens", issue_agent, own_admin_guard(auth))
    router.add("GET", "/v1/namespaces/{ns}/tokens/me", me)
