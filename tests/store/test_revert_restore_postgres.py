"""A restore's mark on PostgreSQL (docs/revert.md, "Repeats"): its ops go
through the store's commit there, and the rows' tag (a revert's or a
restore's) picks the ops a revert decodes; reverting a writer whose work a
restore took back takes back nothing of it, and its work after the restore
goes, as on the embedded store (tests/test_revert_restore.py)."""

from __future__ import annotations

from typing import Any

import pytest

from syncd.auth import ROOT
from syncd.history import Writer
from tests.store.pgnodes import NS, StartNode, op
from tests.test_revert_restore import CASES, Case

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case[0].split(":")[0])
async def test_a_restore_on_postgresql_is_not_taken_back_again(
    start_node: StartNode, case: Case
) -> None:
    crdt_id, mine, first, later, field = case
    a = await start_node("a")
    for body in mine:
        before = (await op(a, crdt_id, body)).seq
    for body in first:
        await op(a, crdt_id, {**body, "origin": "a1"})

    def value() -> Any:
        read = a.engine.read(NS, crdt_id)
        assert read is not None
        return sorted(read[field]) if isinstance(read[field], list) else read[field]

    last = a.engine.read(NS, crdt_id)
    assert last is not None
    restored = await a.history.restore(NS, crdt_id, before, ROOT, None, "http")
    assert restored["applied"] > 0
    without_agent = value()
    page = await a.history.page(NS, crdt_id, None, 100)
    marks = [o["restores"] for o in page["ops"] if "restores" in o]
    assert marks and all(m == {"to_seq": before, "until_seq": last["seq"]} for m in marks)

    agent = Writer(origin="a1")
    answer = await a.reverts.revert(NS, crdt_id, agent, None, None, ROOT, None, "http")
    assert (answer["applied"], answer["matched"]) == (0, 0), answer
    assert value() == without_agent

    for body in later:
        await op(a, crdt_id, {**body, "origin": "a1"})
    answer = await a.reverts.revert(NS, crdt_id, agent, None, None, ROOT, None, "http")
    assert answer["applied"] > 0 and answer["matched"] == len(later), answer
    assert value() == without_agent
