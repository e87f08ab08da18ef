"""Helpers for API tests: issue tokens through the real admin route."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import ADMIN

ADMIN_HEADERS = {"authorization": f"Bearer {ADMIN}"}


async def issue(
    client: httpx.AsyncClient,
    ns: str = "app",
    client_id: int = 7,
    *,
    read: list[str] | None = None,
    write: list[str] | None = None,
    admin: bool = False,
    rules: dict[str, Any] | None = None,
    ttl_ms: int | None = None,
) -> dict[str, str]:
    body: dict[str, Any] = {"client_id": client_id}
    if rules is not None:
        body["rules"] = rules
    else:
        body["permissions"] = {
            "read": ["*"] if read is None else read,
            "write": ["*"] if write is None else write,
            "admin": admin,
        }
    if ttl_ms is not None:
        body["ttl_ms"] = ttl_ms
    r = await client.post(f"/v1/namespaces/{ns}/tokens", json=body, headers=ADMIN_HEADERS)
    assert r.status_code == 200, r.text
    return {"authorization": f"Bearer {r.json()['token']}"}


async def op(
    client: httpx.AsyncClient,
    headers: dict[str, str],
    crdt_id: str,
    body: Any,
    ns: str = "app",
    query: str = "",
) -> httpx.Response:
    return await client.post(
        f"/v1/namespaces/{ns}/crdts/{crdt_id}/ops{query}", json=body, headers=headers
    )
