"""The demo routes: off by default, and with SERVICE_DEMO=true the page, its
files and short-lived demo tokens that work in the demo namespace only."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from syncd.auth.tokens import decode_claims, split_token
from syncd.http.handlers.demo import (
    DEMO_CLIENT_ID_MAX,
    DEMO_TOKEN_TTL_MS,
    DEMO_TOKEN_WINDOW_MS,
    DEMO_TOKENS_PER_WINDOW,
    load_assets,
)


@pytest.mark.parametrize("path", ["/demo", "/demo/", "/demo/token", "/demo/app.js"])
async def test_demo_is_off_by_default(server: Any, path: str) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.get(path)
    assert r.status_code == 404
    assert r.json()["error"] == "not_found"


async def test_page_and_assets(make_server: Any) -> None:
    srv = await make_server(demo=True)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        r = await client.get("/demo")
        assert r.status_code == 308 and r.headers["location"] == "/demo/"
        r = await client.get("/demo/")
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/html; charset=utf-8"
        assert "not for production" in r.text
        assert (
            "script-src" not in r.headers["content-security-policy"]
        )  # default-src 'self' covers it
        assert r.headers["x-content-type-options"] == "nosniff"
        for name, kind in [
            ("app.js", "text/javascript"),
            ("syncd-client.js", "text/javascript"),
            ("style.css", "text/css"),
        ]:
            r = await client.get(f"/demo/{name}")
            assert r.status_code == 200, name
            assert r.headers["content-type"].startswith(kind)
        for missing in ["nope.js", "..%2Fapp.py", "index.htm"]:
            r = await client.get(f"/demo/{missing}")
            assert r.status_code == 404, missing
        r = await client.head("/demo/app.js")
        assert r.status_code == 200 and r.content == b""


def test_assets_are_the_package_files() -> None:
    assets = load_assets()
    assert {"index.html", "app.js", "style.css", "syncd-client.js"} <= set(assets)
    # The bundle carries the client and msgpack: the page needs nothing from elsewhere.
    bundle = assets["syncd-client.js"][1].decode()
    assert "var CollabText = class" in bundle and "var Decoder = class" in bundle
    assert "\nimport " not in bundle and ' from "' not in bundle


async def test_demo_token_works_in_demo_namespace_only(make_server: Any) -> None:
    srv = await make_server(demo=True)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        before = int(time.time() * 1000)  # the server counts whole milliseconds
        r = await client.get("/demo/token")
        assert r.status_code == 200
        assert r.headers["cache-control"] == "no-store"
        body = r.json()
        claims = decode_claims(split_token(body["token"])[0])
        assert claims.namespace == body["namespace"] == "demo"
        assert claims.client_id == body["client_id"]
        assert 1 <= claims.client_id <= DEMO_CLIENT_ID_MAX
        assert (
            before + DEMO_TOKEN_TTL_MS
            <= claims.expires_at
            <= time.time() * 1000 + DEMO_TOKEN_TTL_MS
        )
        auth = {"authorization": f"Bearer {body['token']}"}
        r = await client.post(
            "/v1/namespaces/demo/crdts/pn:demo-counter-r1/ops",
            json={"op": "increment"},
            headers=auth,
        )
        assert r.status_code == 200
        # Narrow: only the demo page's CRDTs, only in the demo namespace.
        r = await client.post(
            "/v1/namespaces/demo/crdts/gc:x/ops", json={"op": "increment"}, headers=auth
        )
        assert r.status_code == 403
        r = await client.get("/v1/namespaces/other/crdts/gc:x", headers=auth)
        assert r.status_code == 403
        r = await client.post("/v1/namespaces/demo/tokens", json={"client_id": 1}, headers=auth)
        assert r.status_code == 403  # not an admin token
        other = (await client.get("/demo/token")).json()
        assert other["token"] != body["token"]


async def test_demo_token_ttl_respects_max_token_ttl(make_server: Any) -> None:
    srv = await make_server(demo=True, max_token_ttl_ms=60_000)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        body = (await client.get("/demo/token")).json()
    assert body["expires_at"] - time.time() * 1000 <= 60_000


async def test_demo_tokens_are_rate_limited_per_address(make_server: Any) -> None:
    srv = await make_server(demo=True)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        answers = [await client.get("/demo/token") for _ in range(DEMO_TOKENS_PER_WINDOW)]
        assert {r.status_code for r in answers} == {200}
        refused = await client.get("/demo/token")
        assert refused.status_code == 429 and refused.json()["error"] == "rate_limited"
        assert 1 <= int(refused.headers["retry-after"]) <= DEMO_TOKEN_WINDOW_MS // 1000
        # Other routes and the API are not affected by the demo's limit.
        assert (await client.get("/demo/")).status_code == 200
