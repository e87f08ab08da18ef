"""Revert on PostgreSQL: the history comes from the ``ops`` rows, the revert
may be asked of a node other than the one that took the ops, and its ops
reach every node (and a node started afterwards) like any write."""

from __future__ import annotations

from typing import Any

from syncd.app import App
from syncd.auth.authenticator import Principal
from syncd.history import Writer
from tests.store.pgnodes import NS, StartNode, eventually, load
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
