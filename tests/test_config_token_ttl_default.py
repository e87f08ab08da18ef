"""SERVICE_MAX_TOKEN_TTL_MS below an hour also shortens the default lifetime
of a token issued without ttl_ms (to the maximum), as docs/configuration.md
says, rather than refusing the request."""

from __future__ import annotations

import time
from typing import Any

import httpx

from syncd.auth.tokens import parse_token
from tests.conftest import ADMIN


def test_a_maximum_below_an_hour_is_the_default_lifetime(spawn_server: Any) -> None:
    server = spawn_server({"SERVICE_MAX_TOKEN_TTL_MS": "60000"})
    before = time.time_ns() // 1_000_000
    r = httpx.post(
        f"{server.url}/v1/namespaces/app/tokens",
        json={"client_id": 1, "permissions": {"read": ["*"]}},
        headers={"authorization": f"Bearer {ADMIN}"},
        timeout=5,
    )
    after = time.time_ns() // 1_000_000
    assert r.status_code == 200, r.text
    claims, _ = parse_token(r.json()["token"])
    assert before + 60_000 <= claims.expires_at <= after + 60_000
    assert server.terminate() == 0
