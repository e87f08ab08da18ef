"""Token routes (docs/permissions.md#issuing-tokens): issue (admin) and inspect (the caller's own)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from syncd.auth.issue import describe, issue, parse_issue_body
from syncd.http.request import Request
from syncd.http.response import Response, json_response
from syncd.ids import check_namespace

if TYPE_CHECKING:
    from syncd.app import App


def register(app: App) -> None:
    settings = app.settings

    def issue_in_namespace(request: Request) -> Response:
        ns = check_namespace(request.params["ns"])
        principal = app.authenticate(request, ns)
        app.auth.check_admin(principal, ns)
        body = request.json(settings.json_max_depth)
        parsed = parse_issue_body(body, ns, settings.max_token_ttl_ms)
        return json_response({"token": issue(app.signing_key, parsed, time.time_ns() // 1_000_000)})

    def issue_agent(request: Request) -> Response:
        principal = app.authenticate(request, None)
        body = request.json(settings.json_max_depth)
        parsed = parse_issue_body(body, None, settings.max_token_ttl_ms)
        app.auth.check_admin(principal, parsed.namespace)
        return json_response({"token": issue(app.signing_key, parsed, time.time_ns() // 1_000_000)})

    def me(request: Request) -> Response:
        ns = check_namespace(request.params["ns"])
        principal = app.authenticate(request, ns)
        return json_response(describe(principal))

    app.router.add("POST", "/v1/namespaces/{ns}/tokens", issue_in_namespace)
    app.router.add("POST", "/v1/tokens", issue_agent)
    app.router.add("GET", "/v1/namespaces/{ns}/tokens/me", me)
