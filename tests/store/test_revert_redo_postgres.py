"""Undo and redo on PostgreSQL (docs/revert.md, "Repeats"): the revert's ops
go as one request there, and the rows' writer and tag pick the ops a revert
decodes; undo, redo and their repeats end as on the embedded store
(tests/test_revert_redo.py)."""

from __future__ import annotations

from typing import Any

import pytest

from syncd.auth import ROOT
from syncd.history import Writer
from tests.store.pgnodes import NS, StartNode, op
from tests.test_revert_redo import STEPS, UNDO

pytestmark = pytest.mark.timeout(60)

CASES: list[tuple[str, list[dict[str, Any]], str, Any]] = [
    (
        "pn:votes",
        [{"op": "increment", "amount": 3}, {"op": "increment", "amount": 40, "origin": "a1"}],
        "value",
        3,
    ),
    (
        "rg:doc",
        [
            {"op": "insert", "index": 0, "text": "one two three"},
            {"op": "delete", "index": 4, "count": 4, "origin": "a1"},
            {"op": "insert", "index": 0, "text": "> "},
            {"op": "insert", "index": 2, "text": "AI ", "origin": "a1"},
        ],
        "text",
        "> one two three",
    ),
    (
        "or:tags",
        [
            {"op": "add", "element": "draft"},
            {"op": "remove", "element": "draft", "origin": "a1"},
            {"op": "add", "element": "ai", "origin": "a1"},
        ],
        "value",
        ["draft"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case[0].split(":")[0])
async def test_undo_and_redo_alternate_on_postgresql(
    start_node: StartNode, case: tuple[str, list[dict[str, Any]], str, Any]
) -> None:
    crdt_id, writes, field, without = case
    a = await start_node("a")
    for body in writes:
        await op(a, crdt_id, body)

    def value() -> Any:
        read = a.engine.read(NS, crdt_id)
        assert read is not None
        return read[field]

    states = {"with": value(), "without": without}
    undo, redo = Writer(origin=UNDO["origin"]), Writer(ROOT.client_id, "revert")
    for n, (body, state, applies) in enumerate(STEPS):
        writer = undo if body is UNDO else redo
        answer = await a.reverts.revert(NS, crdt_id, writer, None, None, ROOT, None, "http")
        assert (answer["applied"] > 0) == applies, (n, answer)
        assert value() == states[state], n
