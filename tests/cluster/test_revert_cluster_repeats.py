"""The same revert, sent without an ``op_id`` to two nodes of a PostgreSQL
cluster at once, is applied once (docs/revert.md, "Repeats"). Each node reads
its window before the other's ops are committed, so both compute the same ops
on the same state; before, both were applied (an agent's +5 taken back twice:
-5). A revert without an ``op_id`` now gives its ops one derived from what
they were computed on (the life, the window's last seq, the ops it takes
back), so the second to commit is answered as a repeat. A revert computed on
a later state (the first's ops in it, or the writer's new work) is another
revert and applies as usual."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from syncd.app import App
from syncd.auth.authenticator import Principal
from syncd.history.reads import Writer
from tests.store.pgnodes import NS, StartNode, eventually, load, sql_conn
from tests.ws.support import mint

HUMAN, AGENT = 7, 9


def principal(app: App, client_id: int) -> Principal:
    return app.auth.authenticate(f"Bearer {mint(client_id, ns=NS)}", NS)


def value(app: App, crdt_id: str) -> Any:
    return (app.engine.read(NS, crdt_id) or {}).get("value")


async def held_locked(
    a: App, crdt_id: str, *requests: Coroutine[Any, Any, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The requests on their nodes, each computed before any commits: the
    CRDT's row is held locked (as a third node's transaction would) until all
    are waiting to commit."""
    with sql_conn(a.settings.database_url or "") as conn:
        conn.execute("BEGIN")
        conn.execute("SELECT 1 FROM crdts WHERE ns = %s AND id = %s FOR UPDATE", (NS, crdt_id))
        tasks = [asyncio.ensure_future(request) for request in requests]
        with sql_conn(a.settings.database_url or "") as watch:
            waiting = (
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            await eventually(lambda: watch.execute(waiting).fetchone() == (len(tasks),))
        assert not any(task.done() for task in tasks)
        conn.execute("COMMIT")
    return list(await asyncio.gather(*tasks))


async def at_once(a: App, b: App, crdt_id: str, writer: Writer) -> list[dict[str, Any]]:
    """The same revert on both nodes at once (:func:`held_locked`)."""
    return await held_locked(a, crdt_id, undo(a, crdt_id, writer), undo(b, crdt_id, writer))


async def undo(app: App, crdt_id: str, writer: Writer, op_id: str | None = None) -> dict[str, Any]:
    return await app.reverts.revert(
        NS, crdt_id, writer, None, None, principal(app, HUMAN), op_id, "http"
    )


async def test_the_same_revert_on_two_nodes_at_once_is_applied_once(
    start_node: StartNode,
) -> None:
    a = await start_node("a")
    b = await start_node("b")
    agent = principal(a, AGENT)
    await a.service.apply_ops(
        NS, "pn:v", {"op": "increment", "amount": 3}, principal(a, HUMAN), "http"
    )
    await a.service.apply_ops(NS, "pn:v", {"op": "increment", "amount": 5}, agent, "http")
    await load(b, "pn:v")
    await eventually(lambda: value(b, "pn:v") == 8)
    both = await at_once(a, b, "pn:v", Writer(client_id=AGENT))
    assert sorted(bool(x.get("duplicate")) for x in both) == [False, True], both
    assert [x["seq"] for x in both] == [3, 3], both
    assert value(a, "pn:v") == 3
    await eventually(lambda: value(b, "pn:v") == 3)
    # The ops carry the derived op_id, in /history as any op_id.
    page = await a.history.page(NS, "pn:v", None, 10, Writer(origin="revert"))
    assert [o["seq"] for o in page["ops"]] == [3]
    assert str(page["ops"][0].get("op_id", "")).startswith("revert:")

    # The writer's new work is another revert's, on either node.
    await a.service.apply_ops(NS, "pn:v", {"op": "increment", "amount": 2}, agent, "http")
    await eventually(lambda: value(b, "pn:v") == 5)
    again = await undo(b, "pn:v", Writer(client_id=AGENT))
    assert (again["matched"], again["applied"]) == (1, 1) and "duplicate" not in again
    assert value(b, "pn:v") == 3
    # Sent again after it: nothing left to take back.
    await eventually(lambda: value(a, "pn:v") == 3)
    last = await undo(a, "pn:v", Writer(client_id=AGENT))
    assert (last["matched"], last["applied"]) == (0, 0)
    assert value(a, "pn:v") == 3


async def test_two_nodes_reverting_the_same_text_at_once_take_it_back_once(
    start_node: StartNode,
) -> None:
    a = await start_node("a")
    b = await start_node("b")
    human, agent = principal(a, HUMAN), principal(a, AGENT)
    await a.service.apply_ops(
        NS, "rg:d", {"op": "insert", "index": 0, "text": "keep"}, human, "http"
    )
    for text in ("one ", "two "):
        body = {"op": "insert", "index": 0, "text": text, "origin": "agent:x"}
        await a.service.apply_ops(NS, "rg:d", body, agent, "http")
    await a.service.apply_ops(NS, "rg:d", {"op": "delete", "index": 8, "count": 2}, agent, "http")
    await load(b, "rg:d")
    await eventually(lambda: (b.engine.read(NS, "rg:d") or {}).get("seq") == 4)
    both = await at_once(a, b, "rg:d", Writer(client_id=AGENT))
    assert sorted(bool(x.get("duplicate")) for x in both) == [False, True], both
    assert (a.engine.read(NS, "rg:d") or {}).get("text") == "keep"
    await eventually(lambda: (b.engine.read(NS, "rg:d") or {}).get("text") == "keep")


async def test_the_same_restore_on_two_nodes_at_once_is_applied_once(
    start_node: StartNode,
) -> None:
    """A restore without an op_id likewise (syncd/history/restore.py): before,
    a counter at 8 restored to 3 by two nodes at once ended at -2."""
    a = await start_node("a")
    b = await start_node("b")
    human, agent = principal(a, HUMAN), principal(a, AGENT)
    await a.service.apply_ops(NS, "pn:r", {"op": "increment", "amount": 3}, human, "http")
    await a.service.apply_ops(NS, "pn:r", {"op": "increment", "amount": 5}, agent, "http")
    await load(b, "pn:r")
    await eventually(lambda: value(b, "pn:r") == 8)

    async def restore(app: App) -> dict[str, Any]:
        return await app.history.restore(NS, "pn:r", 1, principal(app, HUMAN), None, "http")

    both = await held_locked(a, "pn:r", restore(a), restore(b))
    assert sorted(bool(x.get("duplicate")) for x in both) == [False, True], both
    assert value(a, "pn:r") == 3
    await eventually(lambda: value(b, "pn:r") == 3)
    # Restored again after more writes: another restore, applied.
    await a.service.apply_ops(NS, "pn:r", {"op": "increment", "amount": 2}, agent, "http")
    await eventually(lambda: value(b, "pn:r") == 5)
    again = await restore(b)
    assert again["applied"] == 1 and "duplicate" not in again, again
    assert value(b, "pn:r") == 3


async def test_a_request_with_an_op_id_on_two_nodes_at_once_answers_the_second_as_a_repeat(
    start_node: StartNode,
) -> None:
    """With the client's op_id, the second to commit was applied once too,
    but answered as if it had applied the ops (``applied`` 1, no
    ``duplicate``) where a repeat noticed before is answered ``{"ok", "seq",
    "duplicate": true}`` (docs/revert.md, "Repeats"): now answered so."""
    a = await start_node("a")
    b = await start_node("b")
    human, agent = principal(a, HUMAN), principal(a, AGENT)
    await a.service.apply_ops(NS, "pn:o", {"op": "increment", "amount": 3}, human, "http")
    await a.service.apply_ops(NS, "pn:o", {"op": "increment", "amount": 5}, agent, "http")
    await load(b, "pn:o")
    await eventually(lambda: value(b, "pn:o") == 8)
    writer = Writer(client_id=AGENT)
    both = await held_locked(
        a, "pn:o", undo(a, "pn:o", writer, "u1"), undo(b, "pn:o", writer, "u1")
    )
    repeats = [x for x in both if x.get("duplicate")]
    assert repeats == [{"ok": True, "seq": 3, "duplicate": True}], both
    assert value(a, "pn:o") == 3

    async def restore(app: App) -> dict[str, Any]:
        return await app.history.restore(NS, "pn:o", 2, principal(app, HUMAN), "r1", "http")

    await eventually(lambda: value(b, "pn:o") == 3)
    both = await held_locked(a, "pn:o", restore(a), restore(b))
    repeats = [x for x in both if x.get("duplicate")]
    assert repeats == [{"ok": True, "seq": 4, "restored": 2, "duplicate": True}], both
    assert value(a, "pn:o") == 8
