"""rga: the memory budget's estimate of a sequence counts its runs.

The budget (SERVICE_MEMORY_BUDGET_MB) estimates an entry from its state's
encoding. An rga's state joins the runs of a chain and writes a deleted
run as a count, so a text with every other element deleted (one request)
encodes in about 9 bytes a run while each run takes about 110 in memory:
four times the estimate, so the budget let such CRDTs take several times
the memory it was set to.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from syncd.crdt.rga import Rga
from tests.http.support import issue, op

CHARACTERS = 40_000
"""The text's length (every other element deleted: 20,000 runs). The bound is
a ratio of per-run costs, the same at any length where the runs outweigh a
CRDT's fixed bytes: estimate/held measured 0.81 here and 0.85 at 160,000;
with the runs uncounted, 0.19 and 0.23 (under the 0.5 the test asks)."""


@pytest.fixture
def http_parser() -> str:
    return "httptools"


def _held_bytes(rga: Rga) -> int:
    """What ``rga`` takes when loaded from its state, id index included."""
    state = rga.state()
    gc.collect()
    tracemalloc.start()
    try:
        loaded = Rga.from_state(state)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert loaded.run_count() == rga.run_count()
    return held


async def test_the_estimate_of_a_cut_up_text_is_within_twice_its_memory(
    make_server: Callable[..., Any],
) -> None:
    server = await make_server(rate_limit=1_000_000)
    engine = server.app.engine
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
        headers = await issue(client)
        for crdt_id in ("rg:cut", "rg:plain"):
            r = await op(
                client, headers, crdt_id, {"op": "insert", "index": 0, "text": "x" * CHARACTERS}
            )
            assert r.status_code == 200, r.text
        ids = r.json()["ids"]
        r = await op(client, headers, "rg:cut", {"op": "delete", "ids": ids[::2]})
        assert r.status_code == 200, r.text
    entry = engine.get("app", "rg:cut")
    assert entry is not None and isinstance(entry.crdt, Rga)
    engine.resize(entry)
    held = _held_bytes(entry.crdt)
    # Runs uncounted, the estimate was a quarter of it.
    assert held / 2 < entry.size < 2 * held, (entry.size, held)
