"""History, ?at= reads and restore on PostgreSQL past pruned ops
(docs/http-api.md, "History and restore"): what the embedded store answers
(tests/history), the PostgreSQL store answers too."""

from __future__ import annotations

import pytest

from syncd.auth import ROOT
from syncd.errors import ApiError
from syncd.store.history_index import Retention
from tests.store.pgnodes import NS, StartNode, op

pytestmark = pytest.mark.timeout(60)

PRUNING = {
    "snapshot_every": 5,
    "ops_retained": 0,
    "settings": {"history_retention": Retention.parse("0ops")},
}


async def test_the_state_at_seq_0_of_a_pruned_history_is_expired(start_node: StartNode) -> None:
    # The ops from seq 1 are gone: the state at 0 is older than `oldest`, so
    # a read at 0 and a restore to 0 are 410, as on the embedded store (a
    # restore to 0 took the CRDT back to empty past what retention keeps).
    a = await start_node("a", **PRUNING)
    for _ in range(12):
        await op(a, "pn:x", {"op": "increment", "amount": 1})
    page = await a.history.page(NS, "pn:x", None, 100)
    assert page["oldest"] == 10
    with pytest.raises(ApiError) as read:
        await a.history.read_at(NS, "pn:x", 0, full=False)
    assert (read.value.status, read.value.code) == (410, "history_expired")
    assert read.value.extra == {"oldest": 10}
    with pytest.raises(ApiError) as restore:
        await a.history.restore(NS, "pn:x", 0, ROOT, None, "http")
    assert (restore.value.status, restore.value.code) == (410, "history_expired")
    read_now = a.engine.read(NS, "pn:x")
    assert read_now is not None and read_now["value"] == 12


async def test_the_state_at_seq_0_of_a_whole_history_is_empty(start_node: StartNode) -> None:
    a = await start_node("a", **PRUNING)
    for _ in range(3):
        await op(a, "pn:x", {"op": "increment", "amount": 1})
    at = await a.history.read_at(NS, "pn:x", 0, full=False)
    assert (at["seq"], at["value"]) == (0, 0)
