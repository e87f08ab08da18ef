"""tree: a revert's cost grows with its window, not with the window squared.

A tree's revert replays the window without the writer's ops; another
writer's op that then cannot apply (an add under a node the writer added)
keeps the writer's ops it depends on. Those were found by scanning the
window before each such op, so a writer's one node with thousands of
others' nodes added under it made the revert hold the event loop for
seconds (a minute for a window near MAX_REVERT_WINDOW).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.http.support import issue, op


@pytest.fixture
def http_parser() -> str:
    return "httptools"


async def _revert_time(client: httpx.AsyncClient, headers: dict[str, str], others: int) -> float:
    """The time of a revert of one writer's node with ``others`` nodes
    added under it by other ops (an origin of its own marks the writer's)."""
    crdt_id = f"tr:under-{others}"
    r = await op(client, headers, crdt_id, {"op": "add", "id": "P", "origin": "agent:a"})
    assert r.status_code == 200, r.text
    for start in range(0, others, 1000):
        adds = [{"op": "add", "id": f"n{i}", "parent": "P"} for i in range(start, start + 1000)]
        r = await op(client, headers, crdt_id, adds)
        assert r.status_code == 200, r.text
    # CPU time of this thread, which runs the in-process server's loop and
    # the client: other processes' load does not move it (the wall clock).
    started = time.thread_time()
    r = await client.post(
        f"/v1/namespaces/app/crdts/{crdt_id}/revert", json={"origin": "agent:a"}, headers=headers
    )
    took = time.thread_time() - started
    assert r.status_code == 200, r.text
    # The others' adds depend on it: nothing is taken back.
    assert (r.json()["matched"], r.json()["applied"]) == (1, 0)
    return took


async def test_a_revert_with_many_dependent_ops_costs_in_proportion(
    make_server: Callable[..., Any],
) -> None:
    server = await make_server(rate_limit=1_000_000)
    async with httpx.AsyncClient(base_url=server.url, timeout=300) as client:
        headers = await issue(client)
        few = await _revert_time(client, headers, 2000)
        many = await _revert_time(client, headers, 16000)
    # Eight times the ops: about eight times the time, where scanning the
    # window before each dependent op made it about forty.
    assert many < 20 * few, (few, many)
