"""A snapshot the hub fans out (a cluster node reloading a CRDT announces its
state: ``CrdtService.load_snapshot(announce=True)``) moves the stream to it:
the ops after it are written even where the stream had gone further before
(memory ahead of the database, a lost commit, the replicator reloads at the
database's seq and the next ops take the lost seqs again)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import RunningServer
from tests.http.support import issue, op
from tests.http.test_events import SseReader

DOC = "gc:reloaded"


async def test_ops_after_an_announced_snapshot_behind_the_stream_are_written(
    server: RunningServer,
) -> None:
    service = server.app.service
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        h = await issue(client)
        assert (await op(client, h, DOC, {"op": "increment"})).status_code == 200
        at_one = service.export("app", DOC)
        sse, status, _ = await SseReader.open(
            server.port, f"/v1/namespaces/app/crdts/{DOC}/events", h
        )
        assert status == 200
        assert (await sse.event())["seq"] == 1
        ops: list[dict[str, Any]] = []
        for _ in range(2):
            assert (await op(client, h, DOC, {"op": "increment", "amount": 5})).status_code == 200
            ops.append(await sse.event())
        assert [d["seq"] for d in ops] == [2, 3]
        # What the replicator does when memory is ahead of the database: the
        # CRDT reloaded at the database's seq, announced, then the ops the
        # other nodes committed there (other ops, at the lost seqs).
        service.forget("app", DOC)
        service.load_snapshot(at_one, announce=True)
        snapshot = await sse.event()
        assert (snapshot["kind"], snapshot["seq"]) == ("snapshot", 1)
        redone = {**ops[0], "op": {**ops[0]["op"], "amount": 2}}
        assert service.apply_remote(redone)
        after = await sse.event()
        assert (after["kind"], after["seq"], after["op"]["amount"]) == ("op", 2, 2)
        sse.close()
