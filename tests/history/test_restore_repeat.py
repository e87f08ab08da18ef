"""A restore repeated with its op_id answers the seq the first answered: that
of its last op, not its first (syncd/history/restore.py: repeated)."""

from __future__ import annotations

import httpx

from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"


async def test_a_repeated_restore_of_several_ops_answers_the_first_seq(
    server: RunningServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        assert (await op(client, h, "rg:t", {"op": "insert", "index": 0, "text": "ab"})).is_success
        assert (await op(client, h, "rg:t", {"op": "delete", "index": 0, "count": 1})).is_success
        assert (await op(client, h, "rg:t", {"op": "insert", "index": 1, "text": "c"})).is_success
        # Back to seq 1: one insert of "a" again and one delete of "c".
        body = {"seq": 1, "op_id": "undo-1"}
        first = await client.post(f"{BASE}/rg:t/restore", json=body, headers=h)
        assert first.status_code == 200, first.text
        assert first.json()["applied"] == 2
        again = await client.post(f"{BASE}/rg:t/restore", json=body, headers=h)
        assert again.status_code == 200, again.text
        assert again.json() == {
            "ok": True,
            "seq": first.json()["seq"],
            "restored": 1,
            "duplicate": True,
        }
        read = await client.get(f"{BASE}/rg:t", headers=h)
        assert read.json()["seq"] == first.json()["seq"]
        assert read.json()["text"] == "ab"


async def test_a_restore_to_a_future_seq_names_its_seq_field(server: RunningServer) -> None:
    """400 naming the body's ``seq``, not ``at`` (the read's query parameter)."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        assert (await op(client, h, "pn:c", {"op": "increment"})).is_success
        r = await client.post(f"{BASE}/pn:c/restore", json={"seq": 5}, headers=h)
        assert r.status_code == 400, r.text
        assert r.json() == {
            "error": "bad_request",
            "message": "seq: seq 5 is in the future (the CRDT is at seq 1)",
        }
