"""Revert on PostgreSQL: the history comes from the ``ops`` rows, the revert
may be asked of a node other than the one that took the ops (every
revertible type), and its ops reach every node (and a node started
afterwards) like any write."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from pycrdt import Doc, Text

from syncd.app import App
from syncd.auth.authenticator import Principal
from syncd.crdt.engine import MAX_BATCH_OPS
from syncd.crdt.ydoc import YDoc, root_view
from syncd.errors import ApiError
from syncd.history.reads import Writer
from syncd.store.history_index import Retention
from tests.store.pgnodes import NS, StartNode, eventually, full, load, sql_conn
from tests.ws.support import mint

HUMAN, AGENT = 7, 9


def principal(app: App, client_id: int) -> Principal:
    return app.auth.authenticate(f"Bearer {mint(client_id, ns=NS)}", NS)


def text(app: App, crdt_id: str = "rg:doc") -> str | None:
    view = app.engine.read(NS, crdt_id)
    return None if view is None else view.get("text")


async def _story(app: App) -> None:
    human, agent = principal(app, HUMAN), principal(app, AGENT)
    steps: list[tuple[Principal, dict[str, Any]]] = [
        (human, {"op": "insert", "index": 0, "text": "alpha beta"}),
        (agent, {"op": "delete", "index": 0, "count": 6, "origin": "agent:c"}),
        (human, {"op": "insert", "index": 4, "text": "!"}),
        (agent, {"op": "insert", "index": 0, "text": "AI: ", "origin": "agent:c"}),
    ]
    for who, body in steps:
        await app.service.apply_ops(NS, "rg:doc", body, who, "http")
    assert text(app) == "AI: beta!"


async def test_a_revert_on_another_node_reaches_every_node(start_node: StartNode) -> None:
    a = await start_node("a")
    b = await start_node("b")
    await _story(a)
    await load(b, "rg:doc")
    await eventually(lambda: text(b) == "AI: beta!")
    answer = await b.reverts.revert(
        NS, "rg:doc", Writer(origin="agent:c"), None, None, principal(b, HUMAN), "u1", "http"
    )
    assert answer["applied"] == 2 and answer["matched"] == 2
    assert text(b) == "alpha beta!"
    await eventually(lambda: text(a) == "alpha beta!")
    # The op_id holds on the other node too: the first answer, nothing applied twice.
    again = await a.reverts.revert(
        NS, "rg:doc", Writer(origin="agent:c"), None, None, principal(a, HUMAN), "u1", "http"
    )
    assert again == {"ok": True, "seq": answer["seq"], "duplicate": True}
    # A node started afterwards reads it all from PostgreSQL, marks included.
    c = await start_node("c")
    await load(c, "rg:doc")
    assert text(c) == "alpha beta!"
    page = await c.history.page(NS, "rg:doc", None, 10, Writer(origin="revert"))
    assert [o["reverts"] for o in page["ops"]] == [
        {"origin": "agent:c", "since_seq": 1, "until_seq": 4}
    ] * 2
    later = await c.reverts.revert(
        NS, "rg:doc", Writer(client_id=AGENT), None, None, principal(c, HUMAN), None, "http"
    )
    assert later["matched"] == 0  # taken back already, whichever node asks


async def test_every_revertible_type_through_another_node(start_node: StartNode) -> None:
    a = await start_node("a")
    b = await start_node("b")
    human, agent = principal(a, HUMAN), principal(a, AGENT)
    person, bot = Doc(), Doc()
    typed = _yjs(person, lambda t: t.insert(0, "typed"))
    bot.apply_update(base64.b64decode(typed["update"]))
    cases: list[tuple[str, list[tuple[Principal, dict[str, Any]]]]] = [
        ("pn:v", [(human, {"op": "increment", "amount": 3}), (agent, {"op": "decrement"})]),
        ("or:s", [(human, {"op": "add", "element": 1}), (agent, {"op": "remove", "element": 1})]),
        ("lw:r", [(human, {"op": "set", "value": "h"}), (agent, {"op": "set", "value": "a"})]),
        ("tr:t", [(human, {"op": "add", "id": "n"}), (agent, {"op": "delete", "id": "n"})]),
        ("yd:d", [(human, typed), (agent, _yjs(bot, lambda t: t.insert(0, "AI ")))]),
    ]
    for crdt_id, writes in cases:
        for who, body in writes:
            await a.service.apply_ops(NS, crdt_id, body, who, "http")
        before_revert = a.engine.read(NS, crdt_id, full=True)
        assert before_revert is not None
        await load(b, crdt_id)
        await _holds(b, crdt_id, before_revert)
        answer = await b.reverts.revert(
            NS, crdt_id, Writer(client_id=AGENT), None, None, principal(b, HUMAN), None, "http"
        )
        assert answer["applied"] >= 1, crdt_id
        on_b = b.engine.read(NS, crdt_id, full=True)
        await _holds(a, crdt_id, on_b)
    values = {crdt_id: (a.engine.read(NS, crdt_id) or {}).get("value") for crdt_id, _ in cases}
    assert values["pn:v"] == 3 and values["or:s"] == [1] and values["lw:r"] == "h"
    assert [c["id"] for c in values["tr:t"]["children"]] == ["n"]
    entry = a.engine.get(NS, "yd:d")
    assert entry is not None and isinstance(entry.crdt, YDoc)
    assert root_view(entry.crdt.encoded(), "content", "text") == "typed"


async def _holds(app: App, crdt_id: str, state: Any) -> None:
    await eventually(lambda: app.engine.read(NS, crdt_id, full=True) == state)


def _yjs(doc: Doc[Any], edit: Any) -> dict[str, Any]:
    state = doc.get_state()
    edit(doc.get("content", type=Text))
    return {"op": "update", "update": base64.b64encode(doc.get_update(state)).decode()}


async def test_a_revert_of_more_than_a_batch_commits_whole_or_not_at_all(
    start_node: StartNode,
) -> None:
    """A revert's ops go to PostgreSQL in one request, so one transaction,
    however many there are (2,500 here: more than MAX_BATCH_OPS, the bound of
    a client's request). A commit that fails part way through them leaves
    none of them, on the node and in the rows, and the same request again
    (its op_id) then applies them all, instead of answering a repeat of a
    part."""
    count = MAX_BATCH_OPS * 5 // 2
    # History reaching back past the agent's first op (the default keeps 1000).
    a = await start_node("a", settings={"history_retention": Retention(ops=2 * count)})
    human, agent = principal(a, HUMAN), principal(a, AGENT)
    await a.service.apply_ops(NS, "or:bulk", {"op": "add", "element": "keep"}, human, "http")
    for start in range(0, count, MAX_BATCH_OPS):
        adds = [
            {"op": "add", "element": i, "origin": "agent:bulk"}
            for i in range(start, min(count, start + MAX_BATCH_OPS))
        ]
        await a.service.apply_ops(NS, "or:bulk", adds, agent, "http")
    written = count + 1
    url = a.settings.database_url or ""
    with sql_conn(url) as conn:
        # The revert's ops come at seqs written+1 ...: refuse one past its first
        # MAX_BATCH_OPS, as a crash part way through them would.
        conn.execute(
            "CREATE FUNCTION refuse_late() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN IF NEW.seq > {written + MAX_BATCH_OPS} THEN "
            "RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse_late BEFORE INSERT ON ops "
            "FOR EACH ROW EXECUTE FUNCTION refuse_late()"
        )
    batches = a.store.stats.batches

    async def undo() -> dict[str, Any]:
        return await a.reverts.revert(
            NS, "or:bulk", Writer(origin="agent:bulk"), None, None, human, "bulk-undo", "http"
        )

    with pytest.raises(ApiError) as failed:
        await undo()
    assert failed.value.status == 503
    assert a.store.stats.batches == batches  # nothing committed
    # The revert's rows: their count and newest seq (older rows are trimmed).
    reverted = "SELECT count(*), max(seq) FROM ops WHERE id = 'or:bulk' AND seq > %s"
    with sql_conn(url) as conn:
        assert conn.execute(reverted, (written,)).fetchone() == (0, None)
        conn.execute("DROP TRIGGER refuse_late ON ops")
    # The node forgot the CRDT and reads it back from the rows: every element there.
    await load(a, "or:bulk")
    await eventually(lambda: (full(a, "or:bulk") or {}).get("seq") == written)
    view = a.engine.read(NS, "or:bulk")
    assert view is not None and len(view["value"]) == written

    answer = await undo()
    assert (answer["matched"], answer["applied"]) == (count, count)
    assert answer["seq"] == written + count and "duplicate" not in answer
    assert a.store.stats.batches == batches + 1  # one transaction
    view = a.engine.read(NS, "or:bulk")
    assert view is not None and view["value"] == ["keep"]
    with sql_conn(url) as conn:
        assert conn.execute(reverted, (written,)).fetchone() == (count, written + count)
    again = await undo()
    assert again == {"ok": True, "seq": written + count, "duplicate": True}
