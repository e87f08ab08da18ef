"""A namespace holds at most MAX_REVOCATIONS_PER_NAMESPACE revocations
(docs/permissions.md#revoking-tokens), on a real server: at the limit a new
client's revocation is 409 ``too_many_revocations`` while replacing one is
not, and revocations racing for the last place do not take the namespace
past it.

Found by probing: the count was checked before the store's write, outside
anything that orders revocations, so two revocations sent together when one
place was left were both kept (10001 of them) and both answered 200."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx

from syncd.auth.revocations import FILE_FORMAT, MAX_REVOCATIONS_PER_NAMESPACE, REVOCATIONS_FILE
from tests.http.support import ADMIN_HEADERS

T = 1_700_000_000_000


def seed(data_dir: Path, count: int) -> None:
    """``count`` revocations of namespace ``app`` (clients 0…count-1), as the
    server keeps them, so the test does not need that many requests."""
    data_dir.mkdir(parents=True)
    records = [
        {"namespace": "app", "client_id": c, "before_ms": T, "revoked_at": T} for c in range(count)
    ]
    doc = {"format": FILE_FORMAT, "revocations": records}
    (data_dir / REVOCATIONS_FILE).write_text(json.dumps(doc))


async def revoke(client: httpx.AsyncClient, client_id: int, ns: str = "app") -> httpx.Response:
    return await client.post(
        f"/v1/namespaces/{ns}/revocations", json={"client_id": client_id}, headers=ADMIN_HEADERS
    )


async def count(client: httpx.AsyncClient, ns: str = "app") -> int:
    r = await client.get(f"/v1/namespaces/{ns}/revocations", headers=ADMIN_HEADERS)
    assert r.status_code == 200, r.text
    return len(r.json()["revocations"])


async def test_at_the_limit_a_new_client_is_409_and_a_replacement_is_not(
    make_server: Any, tmp_path: Path
) -> None:
    limit = MAX_REVOCATIONS_PER_NAMESPACE
    seed(tmp_path / "data", limit - 1)
    server = await make_server(data_dir=tmp_path / "data")
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await revoke(client, limit - 1)  # the last place
        assert r.status_code == 200, r.text
        r = await revoke(client, limit)
        assert r.status_code == 409, r.text
        assert r.json()["error"] == "too_many_revocations"
        r = await revoke(client, 5)  # replacing one takes no new place
        assert r.status_code == 200, r.text
        r = await revoke(client, 1, ns="other")  # the limit is per namespace
        assert r.status_code == 200, r.text
        assert await count(client) == limit


async def test_revocations_racing_for_the_last_place_keep_the_limit(
    make_server: Any, tmp_path: Path
) -> None:
    limit = MAX_REVOCATIONS_PER_NAMESPACE
    seed(tmp_path / "data", limit - 1)
    server = await make_server(data_dir=tmp_path / "data")
    async with httpx.AsyncClient(base_url=server.url) as client:
        answers = await asyncio.gather(*(revoke(client, limit + i) for i in range(4)))
        statuses = sorted(r.status_code for r in answers)
        assert statuses == [200, 409, 409, 409], [r.text for r in answers]
        assert await count(client) == limit
