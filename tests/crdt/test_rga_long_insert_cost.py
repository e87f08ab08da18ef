"""rga: deleting inside one long insert costs the same however long it was.

One insert op may carry as many elements as a body holds (a megabyte of
text, or of values). They were kept as one run, and a run is cut in two
by copying what follows the cut, so each delete inside it copied the rest
of it: a batch of 1000 one-element deletes (or one delete of many ids)
over a long insert held the event loop for seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from syncd.crdt.rga import Rga
from syncd.crdt.rga.sequence import RUN_MAX
from tests.crdt.crdt_testlib import ctx
from tests.http.support import issue, op

DELETES = 1000
"""One-element deletes per timed batch, every other element from the start."""


@pytest.fixture
def http_parser() -> str:
    return "httptools"


async def _deletes_time(client: httpx.AsyncClient, headers: dict[str, str], length: int) -> float:
    """The best of three batches of DELETES deletes in an insert of ``length`` values."""
    best = float("inf")
    for attempt in range(3):
        crdt_id = f"rg:long-{length}-{attempt}"
        r = await op(client, headers, crdt_id, {"op": "insert", "index": 0, "values": [0] * length})
        assert r.status_code == 200, r.text
        deletes = [{"op": "delete", "index": i} for i in range(DELETES)]
        # CPU time of this thread, which runs the server's loop (in process)
        # and the client: unmoved by other processes' load, unlike the wall
        # clock (4.1x on a loaded machine, past the bound).
        started = time.thread_time()
        r = await op(client, headers, crdt_id, deletes)
        best = min(best, time.thread_time() - started)
        assert r.status_code == 200, r.text
    return best


async def test_deleting_in_a_long_insert_costs_no_more_than_in_a_short_one(
    make_server: Callable[..., Any],
) -> None:
    server = await make_server(rate_limit=1_000_000)
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
        headers = await issue(client)
        short = await _deletes_time(client, headers, 20_000)
        long = await _deletes_time(client, headers, 320_000)
        r = await client.get("/v1/namespaces/app/crdts/rg:long-320000-0", headers=headers)
        assert r.json()["value"] == [0] * (320_000 - DELETES)
    # Copying the rest of the insert at each delete made the long batch about
    # 16 times as slow.
    assert long < 4 * short, (short, long)


def test_long_runs_are_cut_as_made_and_as_loaded() -> None:
    """An insert, a delta and a stored state (one run per chain, however
    long) all give runs of at most RUN_MAX visible elements, and the state
    still shows each chain as one run."""
    text = "ab" * RUN_MAX + "c"
    made = Rga.new()
    made.apply_op({"op": "insert", "index": 0, "text": text}, ctx(7))
    state = made.state()
    assert state == {"runs": [[7, 1, None, text]]}
    replica = Rga.new()
    replica.apply_delta({"op": "insert", "after": None, "client": 7, "counter": 1, "text": text})
    for rga in (made, replica, Rga.from_state(state)):
        assert max(run.vis for run in rga._seq.runs()) <= RUN_MAX
        assert rga.state() == state
        assert rga.view(0)["text"] == text
