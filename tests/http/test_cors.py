"""CORS: preflight answers for the routes a browser page calls, and the policy
(SERVICE_CORS_ORIGINS) on real answers, over real sockets with both parsers."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from syncd.config import from_env
from syncd.http.handlers.cors import (
    ALLOWED_REQUEST_HEADERS,
    CORS_PATTERNS,
    PREFLIGHT_MAX_AGE_S,
    allowed_methods,
)
from tests.conftest import ADMIN

ORIGIN = "https://app.example"

# One concrete path per CORS route, and the methods it must announce.
PATHS = {
    "/v1/namespaces/ns1/crdts": "GET, HEAD, OPTIONS",
    "/v1/namespaces/ns1/crdts/gc:a": "DELETE, GET, HEAD, OPTIONS",
    "/v1/namespaces/ns1/crdts/gc:a/ops": "OPTIONS, POST",
    "/v1/namespaces/ns1/crdts/gc:a/events": "GET, HEAD, OPTIONS",
    "/v1/namespaces/ns1/crdts/gc:a/history": "GET, HEAD, OPTIONS",
    "/v1/namespaces/ns1/crdts/gc:a/restore": "OPTIONS, POST",
    "/v1/namespaces/ns1/crdts/gc:a/revert": "OPTIONS, POST",
    "/v1/namespaces/ns1/tokens": "OPTIONS, POST",
    "/v1/namespaces/ns1/tokens/me": "GET, HEAD, OPTIONS",
    "/v1/tokens": "OPTIONS, POST",
    "/v1/namespaces/ns1/revocations": "GET, HEAD, OPTIONS, POST",
    "/v1/namespaces/ns1/revocations/7": "DELETE, OPTIONS",
    "/v1/namespaces/ns1/usage": "GET, HEAD, OPTIONS",
}


def cors_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.startswith("access-control-")}


def preflight(method: str = "POST", origin: str = ORIGIN) -> dict[str, str]:
    return {
        "origin": origin,
        "access-control-request-method": method,
        "access-control-request-headers": "authorization, content-type",
    }


def test_every_pattern_has_a_concrete_path() -> None:
    assert len(PATHS) == len(CORS_PATTERNS)


async def test_preflight_from_allowed_origin(make_server: Any) -> None:
    # /history, restore, revert, revocations and usage were 405: a page of an
    # allowed origin could not call them with its token.
    srv = await make_server(cors_origins=(ORIGIN, "https://other.example"))
    async with httpx.AsyncClient(base_url=srv.url) as client:
        for path, methods in PATHS.items():
            r = await client.options(path, headers=preflight())
            assert r.status_code == 204, (path, r.text)
            assert r.content == b""
            assert r.headers["access-control-allow-origin"] == ORIGIN
            assert r.headers["access-control-allow-methods"] == methods, path
            assert r.headers["access-control-allow-headers"] == ALLOWED_REQUEST_HEADERS.decode()
            assert r.headers["access-control-max-age"] == str(PREFLIGHT_MAX_AGE_S)
            assert r.headers["vary"] == "Origin"
            assert r.headers["allow"] == methods, path


async def test_wildcard_policy_allows_any_origin(make_server: Any) -> None:
    srv = await make_server(cors_origins=("*",))
    async with httpx.AsyncClient(base_url=srv.url) as client:
        r = await client.options("/v1/namespaces/ns1/crdts/gc:a/ops", headers=preflight())
        assert r.status_code == 204
        assert r.headers["access-control-allow-origin"] == "*"
        assert r.headers["access-control-allow-headers"] == "authorization, content-type"


@pytest.mark.parametrize("origins", [(), ("https://other.example",)])
async def test_disallowed_origin_gets_no_cors_headers(
    make_server: Any, origins: tuple[str, ...]
) -> None:
    srv = await make_server(cors_origins=origins)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        r = await client.options("/v1/namespaces/ns1/crdts/gc:a", headers=preflight("GET"))
        assert r.status_code == 204
        assert cors_headers(r) == {}
        assert r.headers["allow"] == "DELETE, GET, HEAD, OPTIONS"
        # Nor do real answers to that origin.
        r = await client.get(
            "/v1/namespaces/ns1/crdts/gc:a",
            headers={"origin": ORIGIN, "authorization": f"Bearer {ADMIN}"},
        )
        assert r.status_code == 404
        assert cors_headers(r) == {}
        # With CORS on, the answer depends on Origin all the same: a shared
        # cache must not give this one to a page on an allowed origin.
        # Without an Origin too. With CORS off nothing depends on it.
        vary = "Origin" if origins else None
        assert r.headers.get("vary") == vary
        r = await client.get("/v1/openapi.json")
        assert r.status_code == 200 and r.headers.get("vary") == vary


async def test_plain_options_is_204_with_allow(make_server: Any) -> None:
    srv = await make_server(cors_origins=(ORIGIN,))
    async with httpx.AsyncClient(base_url=srv.url) as client:
        for path, methods in PATHS.items():
            r = await client.options(path)
            assert r.status_code == 204, path
            assert r.headers["allow"] == methods
            assert cors_headers(r) == {}
        # An Origin alone is not a preflight: no Allow-Methods/-Headers.
        r = await client.options("/v1/tokens", headers={"origin": ORIGIN})
        assert r.status_code == 204
        assert "access-control-allow-methods" not in r.headers
        assert r.headers["access-control-allow-origin"] == ORIGIN


async def test_options_elsewhere_stays_405(make_server: Any) -> None:
    srv = await make_server(cors_origins=("*",))
    async with httpx.AsyncClient(base_url=srv.url) as client:
        r = await client.options("/metrics", headers=preflight("GET"))
        assert r.status_code == 405
        assert r.headers["allow"] == "GET, HEAD"


async def test_real_answers_carry_the_origin(make_server: Any) -> None:
    srv = await make_server(cors_origins=(ORIGIN,))
    async with httpx.AsyncClient(base_url=srv.url) as client:
        auth = {"authorization": f"Bearer {ADMIN}", "origin": ORIGIN}
        r = await client.post(
            "/v1/namespaces/ns1/crdts/gc:a/ops", json={"op": "increment"}, headers=auth
        )
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == ORIGIN
        assert r.headers["vary"] == "Origin"
        # Errors too, so a page can read why it was refused.
        r = await client.get("/v1/namespaces/ns1/crdts/gc:a", headers={"origin": ORIGIN})
        assert r.status_code == 401
        assert r.headers["access-control-allow-origin"] == ORIGIN


def test_allowed_methods_adds_head_and_options() -> None:
    routes = [("GET", "/a"), ("DELETE", "/a"), ("POST", "/b")]
    assert allowed_methods(routes, "/a") == b"DELETE, GET, HEAD, OPTIONS"
    assert allowed_methods(routes, "/b") == b"OPTIONS, POST"


def test_policy_from_environment() -> None:
    assert from_env({}).cors_origins == ()
    settings = from_env({"SERVICE_CORS_ORIGINS": " https://a.example , *,"})
    assert settings.cors_origins == ("https://a.example", "*")
