"""A CRDT read back from the history (``Store.load``: its newest checkpoint and
the ops after it) replays at most about one checkpoint interval of ops
(history_index.py: a checkpoint once the op bytes since the last one reach
its size, at least CHECKPOINT_MIN_BYTES), on a real server:

- with the CRDT evicted between every write, so that each write loads it
  first (the checkpoint is made when its op is queued, in the loop step that
  applied it: the CRDT is in memory then, whatever happens to it after);
- under concurrent writers, whose ops share log batches: a checkpoint is
  written after its batch's records, so it reaches the index behind the
  CRDT's later ops of that batch. It did not count those ops as after it (it
  left the bytes since the previous checkpoint as they were): the next op's
  batch wrote another checkpoint, and so on until one came last in its
  batch, a checkpoint every few ops (77 instead of 14 for 1,600 increments
  from 8 writers)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from syncd.store.embedded.store import FileStore
from syncd.store.history_index import CHECKPOINT_MIN_BYTES
from tests.conftest import RunningServer
from tests.http.support import issue, op
from tests.test_residency import _evict_all

VALUE = "v" * 1500
"""An op of about 1.6 KB: a checkpoint every ten or so."""


def _interval_ops(op_bytes: int) -> int:
    """The most ops a load may replay: an interval's bytes, and the op that
    crossed it."""
    return CHECKPOINT_MIN_BYTES // op_bytes + 2


async def _replayed(server: RunningServer, crdt_id: str) -> tuple[int, int]:
    """The seq of the checkpoint a load of ``crdt_id`` starts from, and how
    many ops it replays after it."""
    loaded = await server.app.store.load("app", crdt_id)
    assert loaded is not None
    base, records = loaded
    return (base["seq"] if base is not None else 0), len(records)


@pytest.mark.parametrize("http_parser", ["h11"])
async def test_a_crdt_evicted_between_writes_loads_from_a_recent_checkpoint(
    make_server: Callable[..., Any],
) -> None:
    server: RunningServer = await make_server()
    residency = server.app.residency
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        most = _interval_ops(len(VALUE))
        bases = set()
        for i in range(1, 61):
            r = await op(client, h, "lw:r", {"op": "set", "value": f"{i}{VALUE}"})
            assert r.status_code == 200, r.text
            assert await _evict_all(server) == 0
            residency.budget_bytes = 1 << 30
            base, replayed = await _replayed(server, "lw:r")
            assert base + replayed == i
            assert replayed <= most, (i, base, replayed)
            bases.add(base)
        assert residency.stats.loads == 59  # each write but the first loaded it
        assert len(bases) >= 60 // most


@pytest.mark.parametrize("http_parser", ["h11"])
async def test_concurrent_writers_take_a_checkpoint_per_interval_not_per_batch(
    make_server: Callable[..., Any],
) -> None:
    server: RunningServer = await make_server(fsync="batch", rate_limit=1_000_000)
    async with httpx.AsyncClient(
        base_url=server.url, limits=httpx.Limits(max_connections=8)
    ) as client:
        h = await issue(client)
        # The op bytes of an increment, from a lone writer's interval.
        for _ in range(300):
            assert (await op(client, h, "gc:one", {"op": "increment"})).status_code == 200
        store = server.app.store
        assert isinstance(store, FileStore)
        life = store._history.index.get("app", "gc:one")
        assert life is not None and len(life.cp_seqs) >= 2
        interval = life.cp_seqs[1] - life.cp_seqs[0]

        async def writer() -> None:
            for _ in range(200):
                r = await op(client, h, "gc:a", {"op": "increment"})
                assert r.status_code == 200, r.text

        await asyncio.gather(*[writer() for _ in range(8)])
        life = store._history.index.get("app", "gc:a")
        assert life is not None and life.latest == 1600
        cps = list(life.cp_seqs)
        gaps = [b - a for a, b in itertools.pairwise(cps)]
        # About one interval apart (before: runs of one per batch, 3 to 8 ops apart).
        assert min(gaps) >= interval // 2, cps
        assert len(cps) <= 1600 // interval + 1, cps
        base, replayed = await _replayed(server, "gc:a")
        assert base == cps[-1] and replayed <= interval + 16
