"""History reads of a CRDT that is taking writes: its seq in memory counts ops
still on their way to the disk, which the history holds only once they are
durable. Reads, restores and reverts answer from what is durable (waiting
for the ops in flight), never 410, an empty page or ``matched: 0`` because
an op was in flight."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.conftest import RunningServer
from tests.http.support import issue

BASE = "/v1/namespaces/app/crdts"
ROUNDS = 8
"""Rounds of writes racing reads: each round's reads arrive while the
round's writes are in flight (fsync always: each group commit waits for
the disk). Eight stay under the token's rate limit (100 requests a second)."""


async def _race(
    client: httpx.AsyncClient, h: dict[str, str], crdt_id: str, read: Any, writes: int = 3
) -> list[httpx.Response]:
    """``writes`` ops and one read, sent at once; every answer, the read's last."""
    posts = [
        client.post(
            f"{BASE}/{crdt_id}/ops",
            headers=h,
            json={"op": "add", "element": f"e{i}"},
        )
        for i in range(writes)
    ]
    answers = await asyncio.gather(*posts, read())
    for r in answers[:-1]:
        assert r.status_code == 200, r.text
    return answers


async def test_reads_at_a_seq_and_pages_while_the_crdt_takes_writes(
    make_server: Any,
) -> None:
    server: RunningServer = await make_server(fsync="always")
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        r = await client.post(f"{BASE}/or:x/ops", headers=h, json={"op": "add", "element": "a"})
        assert r.status_code == 200, r.text
        for i in range(ROUNDS):
            answers = await _race(
                client, h, "or:x", lambda: client.get(f"{BASE}/or:x?at=1", headers=h)
            )
            at = answers[-1]
            assert at.status_code == 200, (i, at.text)
            assert at.json()["value"] == ["a"], (i, at.text)
            answers = await _race(
                client, h, "or:x", lambda: client.get(f"{BASE}/or:x/history?limit=5", headers=h)
            )
            page = answers[-1]
            assert page.status_code == 200, (i, page.text)
            body = page.json()
            assert body["ops"], (i, body)
            assert [o["seq"] for o in body["ops"]] == list(
                range(body["seq"], body["seq"] - len(body["ops"]), -1)
            ), (i, body)


async def test_a_revert_and_a_restore_while_the_crdt_takes_writes(make_server: Any) -> None:
    server: RunningServer = await make_server(fsync="always")
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)  # client 7 writes
        agent = await issue(client, client_id=8)
        r = await client.post(f"{BASE}/or:y/ops", headers=h, json={"op": "add", "element": "a"})
        assert r.status_code == 200, r.text
        r = await client.post(f"{BASE}/or:y/ops", headers=agent, json={"op": "add", "element": "r"})
        assert r.status_code == 200, r.text
        answers = await _race(
            client,
            h,
            "or:y",
            lambda: client.post(f"{BASE}/or:y/revert", headers=h, json={"client_id": 8}),
        )
        revert = answers[-1]
        assert revert.status_code == 200, revert.text
        assert (revert.json()["matched"], revert.json()["applied"]) == (1, 1), revert.text
        value = (await client.get(f"{BASE}/or:y", headers=h)).json()["value"]
        assert "r" not in value and "a" in value, value

        answers = await _race(
            client,
            h,
            "or:y",
            lambda: client.post(f"{BASE}/or:y/restore", headers=h, json={"seq": 1}),
        )
        restore = answers[-1]
        assert restore.status_code == 200, restore.text
        assert restore.json()["applied"] > 0, restore.text
        assert (await client.get(f"{BASE}/or:y", headers=h)).json()["value"] == ["a"]
