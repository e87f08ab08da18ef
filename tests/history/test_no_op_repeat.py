"""A restore or a revert that changes nothing (the state is already the one
asked for) still remembers its ``op_id``: its retry is a repeat, answered as
the first was, and applies nothing, even after others wrote meanwhile
(docs/revert.md, "Repeats"; syncd/history/restore.py: remember_no_op).
Before, it left no op id, and a retried restore took back the others'
acknowledged writes made since; a retried revert took back the writer's
newer ops. On the embedded store and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from syncd.app import App
from syncd.server import Server
from tests.conftest import RunningServer, base_settings
from tests.http.support import issue, op
from tests.store.pgnodes import pg_db, pg_url, schema

__all__ = ["pg_db", "pg_url", "schema"]  # the PostgreSQL fixtures

BASE = "/v1/namespaces/app/crdts"

Scenario = Callable[[httpx.AsyncClient], Awaitable[None]]


async def restore_retried(client: httpx.AsyncClient) -> None:
    restorer, other = await issue(client, client_id=7), await issue(client, client_id=8)
    assert (await op(client, other, "pn:c", {"op": "increment", "amount": 3})).is_success
    body = {"seq": 1, "op_id": "back-to-1"}
    first = await client.post(f"{BASE}/pn:c/restore", json=body, headers=restorer)
    assert first.status_code == 200, first.text
    assert first.json() == {"ok": True, "seq": 1, "applied": 0, "restored": 1}
    # Acknowledged after the restore: its retry must not take it back.
    assert (await op(client, other, "pn:c", {"op": "increment", "amount": 5})).is_success
    again = await client.post(f"{BASE}/pn:c/restore", json=body, headers=restorer)
    assert again.status_code == 200, again.text
    assert again.json() == {"ok": True, "seq": 1, "restored": 1, "duplicate": True}
    # A repeat naming another seq is told the seq the first restored.
    other_seq = {"seq": 2, "op_id": "back-to-1"}
    named = await client.post(f"{BASE}/pn:c/restore", json=other_seq, headers=restorer)
    assert named.json() == {"ok": True, "seq": 1, "restored": 1, "duplicate": True}
    read = (await client.get(f"{BASE}/pn:c", headers=other)).json()
    assert (read["seq"], read["value"]) == (2, 8)


async def revert_retried(client: httpx.AsyncClient) -> None:
    caller, writer = await issue(client, client_id=7), await issue(client, client_id=8)
    assert (await op(client, caller, "pn:c", {"op": "increment", "amount": 3})).is_success
    body = {"client_id": 8, "op_id": "undo-8"}
    first = await client.post(f"{BASE}/pn:c/revert", json=body, headers=caller)
    assert first.status_code == 200, first.text
    assert (first.json()["applied"], first.json()["matched"]) == (0, 0)
    assert (await op(client, writer, "pn:c", {"op": "increment", "amount": 5})).is_success
    again = await client.post(f"{BASE}/pn:c/revert", json=body, headers=caller)
    assert again.status_code == 200, again.text
    assert again.json() == {"ok": True, "seq": 1, "duplicate": True}
    read = (await client.get(f"{BASE}/pn:c", headers=caller)).json()
    assert (read["seq"], read["value"]) == (2, 8)


async def revert_with_nothing_left_retried(client: httpx.AsyncClient) -> None:
    """Matched, but nothing left in effect to take back (another writer
    deleted the writer's text)."""
    caller, writer = await issue(client, client_id=7), await issue(client, client_id=8)
    assert (await op(client, writer, "rg:t", {"op": "insert", "index": 0, "text": "ab"})).is_success
    assert (await op(client, caller, "rg:t", {"op": "delete", "index": 0, "count": 2})).is_success
    body = {"client_id": 8, "op_id": "undo-8"}
    first = await client.post(f"{BASE}/rg:t/revert", json=body, headers=caller)
    assert first.status_code == 200, first.text
    assert (first.json()["applied"], first.json()["matched"]) == (0, 1)
    more = {"op": "insert", "index": 0, "text": "cd"}
    assert (await op(client, writer, "rg:t", more)).is_success
    again = await client.post(f"{BASE}/rg:t/revert", json=body, headers=caller)
    assert again.json() == {"ok": True, "seq": 2, "duplicate": True}
    assert (await client.get(f"{BASE}/rg:t", headers=caller)).json()["text"] == "cd"


SCENARIOS: list[Scenario] = [restore_retried, revert_retried, revert_with_nothing_left_retried]
IDS = ["restore", "revert-nothing-matched", "revert-nothing-in-effect"]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=IDS)
async def test_a_no_op_retried_after_a_write_is_a_repeat(
    server: RunningServer, scenario: Scenario
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        await scenario(client)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=IDS)
async def test_on_postgresql_too(tmp_path: Path, pg_url: str, scenario: Scenario) -> None:
    """The ops of a revert or a restore go through the store's commit there,
    not staged; a no-op answers before it, and remembers its op_id the same."""
    config = base_settings(tmp_path / "node", database_url=pg_url, node_id="a")
    server = Server(config, App(config))
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=RunningServer(server).url) as client:
            await scenario(client)
    finally:
        await server.shutdown()
