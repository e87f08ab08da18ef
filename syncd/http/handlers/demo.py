"""The demo page (``SERVICE_DEMO=true`` only; off by default, then 404).

``/demo/`` serves the static files of ``syncd/demo`` (the page, its script
and a bundle of the JS client), and ``/demo/token`` mints a short-lived token
for the ``demo`` namespace to anyone who asks. That is what makes the page
work without setup, and also why the demo is for trying syncd out and never
for production: every visitor can read and write everything in ``demo``.
"""

from __future__ import annotations

import ipaddress
import secrets
import time
from importlib import resources
from typing import Final

from syncd.auth.authenticator import rate_limited
from syncd.auth.issue import issue_token
from syncd.auth.ratelimit import RateLimiter
from syncd.auth.tokens import SigningKey
from syncd.config import DEFAULT_DEMO_TOKEN_WINDOW_MS
from syncd.errors import not_found
from syncd.http.request import Request
from syncd.http.response import Response, json_response
from syncd.http.router import Router

DEMO_NAMESPACE: Final = "demo"

DEMO_TOKEN_TTL_MS: Final = 15 * 60 * 1000
"""Demo tokens live 15 minutes (or less under SERVICE_MAX_TOKEN_TTL_MS); the
page fetches a new one before its token runs out, so a leaked one is soon
worthless."""

DEMO_TOKENS_PER_WINDOW: Final = 20
DEMO_TOKEN_WINDOW_MS: Final = DEFAULT_DEMO_TOKEN_WINDOW_MS
"""Demo tokens one client address may get per window: a page needs one per
visit (and one per 15 minutes after that), so a reload now and then stays far
below; minting in a loop gets 429 with Retry-After. The window is
SERVICE_DEMO_TOKEN_WINDOW_MS (this by default): a test of the page's wait
for Retry-After need not wait a whole minute."""

IPV6_CLIENT_PREFIX: Final = 64
"""An IPv6 client is counted by its /64: one host holds a whole /64 (SLAAC,
privacy addresses), so a limit per address would let it mint without end by
changing its last 64 bits."""

DEMO_IDS: Final = (
    "pn:demo-counter*",
    "or:demo-todos*",
    "rg:demo-text*",
    "pr:demo-room*",
    "yd:demo-doc*",
)
"""The CRDTs the demo page uses (a room suffix after each): its tokens reach these only."""

DEMO_CLIENT_ID_MAX: Final = 2**31 - 1
"""Demo client ids are random in 1 … this, so two visitors practically never share one."""

MAX_ASSET_BYTES: Final = 4 * 1024 * 1024
"""Files bigger than this are not served from memory (none of ours comes close)."""

CONTENT_TYPES: Final = {
    ".html": b"text/html; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".svg": b"image/svg+xml",
    ".png": b"image/png",
    ".ico": b"image/x-icon",
}

SECURITY_HEADERS: Final = (
    (b"cache-control", b"no-cache"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (
        b"content-security-policy",
        b"default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; "
        b"object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    ),
)


def limit_key(client: str) -> bytes:
    """What the demo token limit counts ``client`` (an address) under: an
    IPv4 address itself, an IPv6 address its /64."""
    try:
        address = ipaddress.ip_address(client)
    except ValueError:
        return client.encode()
    if isinstance(address, ipaddress.IPv6Address):
        network = ipaddress.IPv6Network((address, IPV6_CLIENT_PREFIX), strict=False)
        return str(network).encode()
    return str(address).encode()


def load_assets() -> dict[str, tuple[bytes, bytes]]:
    """``name -> (content type, bytes)`` of the files in ``syncd/demo`` we know how to serve."""
    assets: dict[str, tuple[bytes, bytes]] = {}
    folder = resources.files("syncd") / "demo"
    if not folder.is_dir():
        return assets
    for item in folder.iterdir():
        name = item.name
        dot = name.rfind(".")
        content_type = CONTENT_TYPES.get(name[dot:]) if dot > 0 else None
        if content_type is None or not item.is_file():
            continue
        data = item.read_bytes()
        if len(data) <= MAX_ASSET_BYTES:
            assets[name] = (content_type, data)
    return assets


def register(
    router: Router,
    signing_key: SigningKey,
    *,
    max_token_ttl_ms: int,
    tokens_per_window: int = DEMO_TOKENS_PER_WINDOW,
    token_window_ms: int = DEMO_TOKEN_WINDOW_MS,
) -> None:
    assets = load_assets()
    minted = RateLimiter(window_ms=token_window_ms)
    ttl_ms = min(DEMO_TOKEN_TTL_MS, max_token_ttl_ms)

    def redirect(_: Request) -> Response:
        return Response(308, b"", None, ((b"location", b"/demo/"),))

    def asset(name: str) -> Response:
        found = assets.get(name)
        if found is None:
            raise not_found(f"no demo file {name!r}")
        content_type, data = found
        return Response(200, data, content_type, SECURITY_HEADERS)

    def index(_: Request) -> Response:
        return asset("index.html")

    def static(request: Request) -> Response:
        return asset(request.params["file"])

    def token(request: Request) -> Response:
        retry_after = minted.hit(limit_key(request.client), tokens_per_window)
        if retry_after:
            raise rate_limited(
                retry_after, "too many demo tokens from this address; try again later"
            )
        now_ms = time.time_ns() // 1_000_000
        client_id = 1 + secrets.randbelow(DEMO_CLIENT_ID_MAX)
        value = issue_token(
            signing_key,
            namespace=DEMO_NAMESPACE,
            client_id=client_id,
            ttl_ms=ttl_ms,
            permissions={"read": list(DEMO_IDS), "write": list(DEMO_IDS)},
            now_ms=now_ms,
        )
        body = {
            "token": value,
            "namespace": DEMO_NAMESPACE,
            "client_id": client_id,
            "expires_at": now_ms + ttl_ms,
        }
        return json_response(body, headers=((b"cache-control", b"no-store"),))

    router.add("GET", "/demo", redirect)
    router.add("GET", "/demo/", index)
    router.add("GET", "/demo/token", token)
    router.add("GET", "/demo/{file}", static)
