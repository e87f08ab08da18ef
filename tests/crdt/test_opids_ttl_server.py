"""Op ids beyond the window, by time, on a real server (docs/data-model.md#op-ids):
with a window of one id and a TTL of 3 s, ids that left the window share an
aged bucket whose first id is older than the TTL while the next is not; each
is still a repeat while younger than the TTL, in memory, and after a restart
with a CRDT that leaves memory after every request (a budget of one byte:
each request loads it from its checkpoint, with the aged buckets it
exported, and the ops after it)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import RunningServer
from tests.http.support import issue, op

TINY_MB = 1e-6
TTL_S = 3
SETTINGS: dict[str, Any] = {"op_id_window": 1, "op_id_ttl_s": TTL_S}


async def _send(client: httpx.AsyncClient, h: dict[str, str], op_id: str) -> dict[str, Any]:
    r = await op(client, h, "pn:n", {"op": "increment", "op_id": op_id})
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


async def test_ids_younger_than_the_ttl_are_repeats_across_loads_and_a_restart(
    make_server: Any, tmp_path: Path
) -> None:
    data_dir = tmp_path / "kept"
    server: RunningServer = await make_server(data_dir=data_dir, **SETTINGS)
    sent: dict[str, tuple[float, int]] = {}
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        # a waits almost the TTL, b little: at c, a is past the TTL (2.9 + 0.2 > 3)
        # while b has 2.8 s to go, room for the restart on a loaded machine.
        for op_id, pause in (("a", TTL_S - 0.1), ("b", 0.2), ("c", 0.0)):
            sent[op_id] = (time.monotonic(), (await _send(client, h, op_id))["seq"])
            await asyncio.sleep(pause)
        # a and b left the window (one id: c) into one bucket, opened by a,
        # which is older than the TTL at c; b is not. A batch of ops with long
        # ids then makes the store write a checkpoint (each 16 KiB of ops), so
        # the CRDT comes back from the aged buckets it exported as well.
        batch = [{"op": "increment", "op_id": f"x{i:0127d}"} for i in range(150)]
        r = await op(client, h, "pn:n", batch)
        assert r.status_code == 200, r.text
        await _send(client, h, "d")  # the checkpoint is due at the append after
        for op_id in ("b", "c"):
            answer = await _send(client, h, op_id)
            assert answer.get("duplicate") and answer["seq"] == sent[op_id][1], (op_id, answer)
    await server.server.shutdown()
    # Restarted with a budget of one byte: every request loads the CRDT from
    # its checkpoint (with the aged buckets it exported) and the ops after it.
    again: RunningServer = await make_server(
        data_dir=data_dir, memory_budget_mb=TINY_MB, **SETTINGS
    )
    async with httpx.AsyncClient(base_url=again.url) as client:
        h = await issue(client)
        base, _ = await again.app.store.load("app", "pn:n") or (None, [])
        assert base is not None and base.get("op_id_hashes"), "no checkpoint to load from"
        for op_id in ("b", "c"):
            assert time.monotonic() - sent[op_id][0] < TTL_S - 0.1, "too slow to test"
            answer = await _send(client, h, op_id)
            assert answer.get("duplicate") and answer["seq"] == sent[op_id][1], (op_id, answer)
        assert (await _send(client, h, "new"))["seq"] == 155
        assert again.app.residency.stats.evictions > 0
