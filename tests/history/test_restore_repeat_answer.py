"""A restore whose op_id was used already answers as a repeat of the first
one, applying nothing: the seq the first restored, not the one the repeat
names (syncd/history/restore.py: repeated). A repeat naming another seq was
answered ``"restored": <that seq>``, telling the client that a restore it
never got was done."""

from __future__ import annotations

import httpx

from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"


async def test_a_repeat_naming_another_seq_answers_the_seq_first_restored(
    server: RunningServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        for amount in (1, 2, 4):
            assert (await op(client, h, "pn:c", {"op": "increment", "amount": amount})).is_success
        first = await client.post(f"{BASE}/pn:c/restore", json={"seq": 2, "op_id": "u"}, headers=h)
        assert first.status_code == 200 and first.json()["applied"] == 1, first.text
        for seq in (2, 0, 1):
            again = await client.post(
                f"{BASE}/pn:c/restore", json={"seq": seq, "op_id": "u"}, headers=h
            )
            assert again.status_code == 200, again.text
            assert again.json() == {
                "ok": True,
                "seq": first.json()["seq"],
                "restored": 2,
                "duplicate": True,
            }
        assert (await client.get(f"{BASE}/pn:c", headers=h)).json()["value"] == 3
