"""A revert whose ops replace what they write (a register's set) is judged on
the state they make, as a client's op is (19ba6fd, docs/operations.md#quotas):
on the embedded store its quota check ran without the writer, so the bound
(the op's size plus 64 bytes) alone decided, and taking back a register's
newer value was refused 413 although the value it sets back fits."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"
HUMAN, AGENT = 7, 9


async def test_a_revert_of_a_register_near_the_crdt_limit_sets_the_old_value_back(
    make_server: Any,
) -> None:
    # Room for one 6,000-character value, not for two: the bound of the
    # revert's set (its size plus 64 bytes, on top of the register) passes
    # the limit, the register it leaves does not.
    server: RunningServer = await make_server(max_crdt_bytes=10_000)
    async with httpx.AsyncClient(base_url=server.url) as client:
        human = await issue(client, client_id=HUMAN)
        agent = await issue(client, client_id=AGENT)
        before, after = "a" * 6000, "b" * 6000
        assert (await op(client, human, "lw:title", {"op": "set", "value": before})).is_success
        assert (await op(client, agent, "lw:title", {"op": "set", "value": after})).is_success
        r = await client.post(f"{BASE}/lw:title/revert", json={"client_id": AGENT}, headers=human)
        assert r.status_code == 200, r.text
        assert r.json()["applied"] == 1
        read = (await client.get(f"{BASE}/lw:title", headers=human)).json()
        assert read["value"] == before
