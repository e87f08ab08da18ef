"""History, ?at= reads and restore on PostgreSQL past pruned ops
(docs/http-api.md, "History and restore"): what the embedded store answers
(tests/history), the PostgreSQL store answers too."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from syncd.app import App
from syncd.auth import ROOT
from syncd.errors import ApiError
from syncd.history import Writer
from syncd.store.history_index import Retention
from tests.store.pgnodes import NS, StartNode, eventually, load, op

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


async def test_a_restore_retried_on_another_node_is_a_repeat_whole(
    start_node: StartNode,
) -> None:
    # A client's restore with op_id "r1" is computed on node a at seq 6 (two
    # ops) and its retry on node b at seq 7, after a concurrent add of "y"
    # (three ops). a commits first; b's first two op ids were then repeats
    # and its third was applied: the retry answered "applied": 3 and took back
    # "y", which the restore the client asked for had left alone. A repeat
    # applies nothing (docs/http-api.md, "Restore").
    a = await start_node("a")
    b = await start_node("b")
    for element in (0, 1, 2, 3, "x"):
        await op(a, "or:s", {"op": "add", "element": element})
    await op(a, "or:s", {"op": "remove", "element": 0})
    await load(b, "or:s")
    await eventually(lambda: seq_of(b) == 6)
    a_go, b_go = asyncio.Event(), asyncio.Event()
    hold_until(a, a_go)
    first = asyncio.create_task(a.history.restore(NS, "or:s", 4, ROOT, "r1", "http"))
    await eventually(lambda: a_go in HELD)
    await op(b, "or:s", {"op": "add", "element": "y"})
    hold_until(b, b_go)
    second = asyncio.create_task(b.history.restore(NS, "or:s", 4, ROOT, "r1", "http"))
    await eventually(lambda: b_go in HELD)
    a_go.set()
    assert (await first)["applied"] == 2
    b_go.set()
    assert (await second)["duplicate"] is True
    await eventually(lambda: seq_of(a) == seq_of(b) == 9)
    read = a.engine.read(NS, "or:s")
    assert read is not None and sorted(map(str, read["value"])) == ["0", "1", "2", "3", "y"]


async def test_a_revert_retried_on_another_node_is_a_repeat_whole(
    start_node: StartNode,
) -> None:
    # As above, for a revert of a writer (docs/revert.md): the retry, computed
    # after the writer's next op, took that op back too, past the repeat.
    a = await start_node("a")
    b = await start_node("b")
    for element in (0, 1, 2):
        await op(a, "or:s", {"op": "add", "element": element})
    for element in ("ag1", "ag2"):
        await op(a, "or:s", {"op": "add", "element": element, "origin": "agent"})
    await load(b, "or:s")
    await eventually(lambda: seq_of(b) == 5)
    agent = Writer(origin="agent")
    a_go, b_go = asyncio.Event(), asyncio.Event()
    hold_until(a, a_go)
    first = asyncio.create_task(a.reverts.revert(NS, "or:s", agent, None, None, ROOT, "v1", "http"))
    await eventually(lambda: a_go in HELD)
    await op(b, "or:s", {"op": "add", "element": "ag3", "origin": "agent"})
    hold_until(b, b_go)
    second = asyncio.create_task(
        b.reverts.revert(NS, "or:s", agent, None, None, ROOT, "v1", "http")
    )
    await eventually(lambda: b_go in HELD)
    a_go.set()
    assert (await first)["applied"] == 2
    b_go.set()
    assert (await second).get("duplicate") is True
    await eventually(lambda: seq_of(a) == seq_of(b) == 8)
    read = a.engine.read(NS, "or:s")
    assert read is not None and sorted(map(str, read["value"])) == ["0", "1", "2", "ag3"]


HELD: set[asyncio.Event] = set()


def seq_of(app: App) -> int:
    entry = app.engine.get(NS, "or:s")
    return -1 if entry is None else entry.seq


def hold_until(app: App, go: asyncio.Event) -> None:
    """Hold the node's next op request (the restore's ops, computed) until ``go``."""
    apply_ops = app.service.apply_ops

    async def held(*args: Any, **kwargs: Any) -> Any:
        app.service.apply_ops = apply_ops  # type: ignore[method-assign]
        HELD.add(go)
        await go.wait()
        return await apply_ops(*args, **kwargs)

    app.service.apply_ops = held  # type: ignore[method-assign]
