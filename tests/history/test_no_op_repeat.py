"""A restore or a revert that changes nothing (the state is already the one
asked for) still remembers its ``op_id``: its retry is a repeat, answered as
the first was, and applies nothing, even after others wrote meanwhile
(docs/revert.md, "Repeats"; syncd/history/restore.py: remember_no_op).
Before, it left no op id, and a retried restore took back the others'
acknowledged writes made since; a retried revert took back the writer's
newer ops."""

from __future__ import annotations

import httpx

from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"


async def test_a_no_op_restore_retried_after_a_write_is_a_repeat(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
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


async def test_a_no_op_revert_retried_after_the_writer_wrote_is_a_repeat(
    server: RunningServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
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


async def test_a_revert_whose_ops_are_all_in_effect_no_more_is_a_repeat_too(
    server: RunningServer,
) -> None:
    """Matched, but nothing left to take back (an earlier revert took it)."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        caller, writer = await issue(client, client_id=7), await issue(client, client_id=8)
        assert (
            await op(client, writer, "rg:t", {"op": "insert", "index": 0, "text": "ab"})
        ).is_success
        assert (
            await op(client, caller, "rg:t", {"op": "delete", "index": 0, "count": 2})
        ).is_success
        body = {"client_id": 8, "op_id": "undo-8"}
        first = await client.post(f"{BASE}/rg:t/revert", json=body, headers=caller)
        assert first.status_code == 200, first.text
        assert (first.json()["applied"], first.json()["matched"]) == (0, 1)
        more = {"op": "insert", "index": 0, "text": "cd"}
        assert (await op(client, writer, "rg:t", more)).is_success
        again = await client.post(f"{BASE}/rg:t/revert", json=body, headers=caller)
        assert again.json() == {"ok": True, "seq": 2, "duplicate": True}
        assert (await client.get(f"{BASE}/rg:t", headers=caller)).json()["text"] == "cd"
