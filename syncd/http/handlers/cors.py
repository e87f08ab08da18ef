"""CORS preflight answers (``OPTIONS``) for the routes a browser page may call.

The policy is ``SERVICE_CORS_ORIGINS`` (comma-separated origins, ``*`` for
any; empty: no cross-origin access). ``App.extra_headers`` puts
``Access-Control-Allow-Origin`` and ``Vary: Origin`` on every answer to an
allowed origin, preflights included; this module adds what only a preflight
carries (allowed methods and request headers, and how long a browser may
cache the answer).

Every ``OPTIONS`` on these routes answers 204 with ``Allow``. A preflight (an
``Origin`` and an ``Access-Control-Request-Method``) from an allowed origin
also gets the ``Access-Control-Allow-*`` headers; one from any other origin
gets none of them, so the browser refuses the cross-origin request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from syncd.http.request import Request
from syncd.http.response import Headers, Response
from syncd.http.router import Router

CORS_PATTERNS: Final = (
    "/v1/namespaces/{ns}/crdts",
    "/v1/namespaces/{ns}/crdts/{id}",
    "/v1/namespaces/{ns}/crdts/{id}/ops",
    "/v1/namespaces/{ns}/crdts/{id}/events",
    "/v1/namespaces/{ns}/crdts/{id}/history",
    "/v1/namespaces/{ns}/crdts/{id}/restore",
    "/v1/namespaces/{ns}/crdts/{id}/revert",
    "/v1/namespaces/{ns}/tokens",
    "/v1/namespaces/{ns}/tokens/me",
    "/v1/tokens",
    "/v1/namespaces/{ns}/revocations",
    "/v1/namespaces/{ns}/revocations/{client_id}",
    "/v1/namespaces/{ns}/usage",
)
"""The routes a browser page may call from another origin (docs/http-api.md#cors):
every route a token calls with its ``Authorization`` header, which a browser
sends cross-origin only after a preflight. Not the WebSocket upgrades (a
browser never preflights them), nor the backup (the root secret's, a tar for
a command line), nor health, metrics and the OpenAPI document, which take
no header a browser would preflight."""

ALLOWED_REQUEST_HEADERS: Final = b"authorization, content-type"
"""What the client sends beyond the CORS-safelisted headers."""

PREFLIGHT_MAX_AGE_S: Final = 600
"""How long a browser may reuse a preflight answer: long enough to spare a
round trip per request, short enough that a changed policy reaches open pages
within minutes (Chromium caps it at 7200 anyway)."""


def origin_allowed(origins: tuple[str, ...], origin: str) -> bool:
    return "*" in origins or origin in origins


def allowed_methods(routes: list[tuple[str, str]], pattern: str) -> bytes:
    """``Allow`` for one pattern: its methods, HEAD with GET, and OPTIONS."""
    methods = {method for method, p in routes if p == pattern}
    if "GET" in methods:
        methods.add("HEAD")
    methods.add("OPTIONS")
    return ", ".join(sorted(methods)).encode("ascii")


def register(router: Router, origins: tuple[str, ...]) -> None:
    # Filled on first use: the other handlers register their methods first.
    allow_cache: dict[str, bytes] = {}

    def handler_for(pattern: str) -> Callable[[Request], Response]:
        def options(request: Request) -> Response:
            allow = allow_cache.get(pattern)
            if allow is None:
                allow = allow_cache[pattern] = allowed_methods(router.routes, pattern)
            headers: Headers = ((b"allow", allow),)
            origin = request.headers.get("origin")
            preflight = origin is not None and "access-control-request-method" in request.headers
            if preflight and origin is not None and origin_allowed(origins, origin):
                headers += (
                    (b"access-control-allow-methods", allow),
                    (b"access-control-allow-headers", ALLOWED_REQUEST_HEADERS),
                    (b"access-control-max-age", str(PREFLIGHT_MAX_AGE_S).encode("ascii")),
                )
            return Response(204, b"", None, headers)

        return options

    for pattern in CORS_PATTERNS:
        router.add("OPTIONS", pattern, handler_for(pattern))
