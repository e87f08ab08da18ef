"""``POST /v1/tokens`` answers a caller that is no admin at all 403 before it
reads the body, as ``POST /v1/namespaces/:ns/tokens`` does: a token that may
not issue learns nothing from the route's validation (which fields exist,
what the maximum lifetime is, that its own token expires), whatever body it
sends (docs/permissions.md#issuing-what-is-refused)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.http.support import issue

BODIES: list[Any] = [
    [],
    {"namespace": "app", "client_id": 1, "permisions": {"read": ["*"]}},
    {"namespace": "app", "client_id": 1, "ttl_ms": 10**15, "permissions": {"read": ["*"]}},
    {"namespace": "app", "client_id": -1, "permissions": {"read": ["*"]}},
    {"namespace": "app", "client_id": 1, "permissions": {}},
    {"namespace": "app", "client_id": 1, "permissions": {"read": ["*"]}},
]


@pytest.mark.parametrize("http_parser", ["h11"], indirect=True)
async def test_a_token_that_is_no_admin_gets_403_whatever_the_body(
    server: RunningServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        readers = [
            await issue(client, "app", 5, read=["*"], write=["*"]),
            await issue(client, "app", 6, rules={"r": [{"p": "*"}], "w": [{"p": "*"}]}),
        ]
        admin_of_other = await issue(client, "other", 7, admin=True)
        for headers in readers:
            for body in BODIES:
                r = await client.post("/v1/tokens", json=body, headers=headers)
                assert r.status_code == 403, (body, r.text)
                assert r.json()["error"] == "forbidden", (body, r.text)
        # An admin of another namespace is refused for this one's tokens.
        r = await client.post("/v1/tokens", json=BODIES[-1], headers=admin_of_other)
        assert r.status_code == 403, r.text
        # An admin still hears what is wrong with its body.
        r = await client.post("/v1/tokens", json=BODIES[1], headers=admin_of_other)
        assert r.status_code == 400 and "permisions" in r.json()["message"], r.text
