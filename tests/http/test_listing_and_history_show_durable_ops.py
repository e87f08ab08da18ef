"""The listing and the history show only durable ops, as a read does
(docs/protocol.md, "Durability and ordering"): the listing's ``seq`` does not
count an op on its way to disk, and a history read during a store failure
answers from what the store holds instead of waiting for its recovery.

The server is real; its log writes wait on a gate, or fail, when the test says
(tests/store/support.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.http.test_reads_show_durable_ops import (
    QUIET_S,
    _hold,
    _in_flight,
    _post,
    _url,
    gated_client,
)
from tests.store.support import ENOSPC
from tests.ws.support import NS, wait_for

COUNTER = "gc:listed"


async def test_the_listing_seq_does_not_count_an_op_in_flight(tmp_path: Path) -> None:
    async with gated_client(tmp_path / "data") as (server, faults, client):
        r = await _post(client, COUNTER, {"op": "increment"})
        assert r.status_code == 200, r.text
        gate = _hold(faults)
        write = asyncio.create_task(_post(client, COUNTER, {"op": "increment"}))
        await _in_flight(faults)
        r = await client.get(f"/v1/namespaces/{NS}/crdts")
        assert r.status_code == 200, r.text
        listed = {item["id"]: item["seq"] for item in r.json()["crdts"]}
        assert listed == {COUNTER: 1}, listed
        gate.set()
        assert (await write).status_code == 200
        # Once answered, the writer reads its own write.
        r = await client.get(f"/v1/namespaces/{NS}/crdts")
        assert {item["id"]: item["seq"] for item in r.json()["crdts"]} == {COUNTER: 2}


async def test_a_history_read_during_a_store_failure_answers_what_is_durable(
    tmp_path: Path,
) -> None:
    async with gated_client(tmp_path / "data") as (server, faults, client):
        r = await _post(client, COUNTER, {"op": "increment"})
        assert r.status_code == 200, r.text
        gate = _hold(faults)
        faults.write_errno = ENOSPC
        write = asyncio.create_task(_post(client, COUNTER, {"op": "increment", "amount": 5}))
        await _in_flight(faults)
        gate.set()
        assert (await write).status_code == 503
        assert not server.app.service.writable  # the disk stays full
        r = await asyncio.wait_for(client.get(_url(COUNTER, "/history")), QUIET_S * 3)
        assert r.status_code == 200, r.text
        assert [item["seq"] for item in r.json()["ops"]] == [1], r.json()
        r = await asyncio.wait_for(client.get(_url(COUNTER, "?at=1")), QUIET_S * 3)
        assert r.status_code == 200 and r.json()["value"] == 1, r.text
        faults.clear()
        await wait_for(lambda: server.app.service.writable)
