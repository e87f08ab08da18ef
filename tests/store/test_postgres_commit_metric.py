"""PostgreSQL's commits are timed like the embedded log's: one observation of
``service_store_commit_seconds`` per committed transaction."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from tests.store.pgnodes import StartNode, op


async def test_each_committed_transaction_is_timed(start_node: StartNode) -> None:
    app = await start_node("a")
    await op(app, "gc:timed", {"op": "increment"})
    await asyncio.gather(*(op(app, f"gc:t{i}", {"op": "increment"}) for i in range(10)))
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(app.metrics.render().decode())
        for s in family.samples
    }
    commits = got[("service_store_commits_total", ())]
    assert commits >= 2
    assert got[("service_store_commit_seconds_count", ())] == commits
    assert 0 < got[("service_store_commit_seconds_sum", ())] < 30
