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


async def test_history_reads_stop_at_the_seq_the_reader_is_at(start_node: StartNode) -> None:
    # A node answers /history, and takes a revert's window, at the seq it has
    # applied (`latest`): ops another node committed since are not yet in its
    # state. Read past it, a page headed "seq": 3 listed ops 4 and 5 (and ?at=5
    # on that node was 400, in the future), as the embedded store never does.
    a = await start_node("a")
    for _ in range(5):
        await op(a, "pn:x", {"op": "increment", "amount": 1})
    entry = a.engine.get(NS, "pn:x")
    assert entry is not None and entry.seq == 5
    records, oldest = await a.store.history(NS, "pn:x", entry.epoch, 3, None, 100)
    assert ([r["seq"] for r in records], oldest) == ([3, 2, 1], 0)
    records, _ = await a.store.history(NS, "pn:x", entry.epoch, 3, 10, 100)
    assert [r["seq"] for r in records] == [3, 2, 1]
    held, oldest = await a.store.history_window(NS, "pn:x", entry.epoch, 3, None, 100)
    assert (held.seqs, oldest) == ([1, 2, 3], 0)
    held, _ = await a.store.history_window(NS, "pn:x", entry.epoch, 3, 2, 100)
    assert held.seqs == [2, 3]
