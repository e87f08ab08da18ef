"""A batch's answer extras cost in proportion to the batch.

The answer to a batch of rga inserts carries every new element's id, the
ids of each insert appended to those of the ones before. They were
appended by making a new list each time, copying the ids so far again: a
batch of 1000 inserts of 900 characters (a body under 1 MiB) held the event
loop for seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.http.support import issue, op

CHARACTERS = 900
"""Characters per insert."""


@pytest.fixture
def http_parser() -> str:
    return "httptools"


async def _batch_time(client: httpx.AsyncClient, headers: dict[str, str], inserts: int) -> float:
    """The best of three batches of ``inserts`` inserts of CHARACTERS characters."""
    best = float("inf")
    for attempt in range(3):
        crdt_id = f"rg:batch-{inserts}-{attempt}"
        body = [
            {"op": "insert", "index": 0, "text": "x" * CHARACTERS, "op_id": f"{attempt}-{i}"}
            for i in range(inserts)
        ]
        # CPU time of this thread, which runs the in-process server's loop and
        # the client: other processes' load does not move it (the wall clock).
        started = time.thread_time()
        r = await op(client, headers, crdt_id, body)
        best = min(best, time.thread_time() - started)
        assert r.status_code == 200, r.text
        ids = r.json()["ids"]
        assert len(ids) == inserts * CHARACTERS
        assert ids[:2] == ["1@7", "2@7"] and ids[-1] == f"{inserts * CHARACTERS}@7"
    # A repeat answers the same ids, from the op-id memory (not extended by the batch).
    r = await op(client, headers, crdt_id, body[:2])
    assert r.json()["ids"] == ids[: 2 * CHARACTERS]
    assert r.json()["duplicate"] is True
    return best


async def test_a_batch_of_inserts_answers_in_time_proportional_to_it(
    make_server: Callable[..., Any],
) -> None:
    server = await make_server(rate_limit=1_000_000)
    async with httpx.AsyncClient(base_url=server.url, timeout=300) as client:
        headers = await issue(client)
        small = await _batch_time(client, headers, 125)
        large = await _batch_time(client, headers, 1000)
    # Eight times the ids: about eight times the time, where copying them
    # at each insert made it about sixty.
    assert large < 24 * small, (small, large)
