"""rga: a restore costs what the texts it compares hold, not their past.

A restore compares the sequence now with the one then. It stepped through
every element either had ever held, deleted ones included; those cost a
few bytes however many (a run), so a megabyte of text typed and deleted
fifty times over (a hundred requests) left a tiny state whose restore held
the event loop for about fifteen seconds (0.3 s per million).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

import syncd.crdt.rga.type as rga_type
from syncd.crdt.rga import Rga
from syncd.crdt.rga.ids import format_id
from tests.crdt.crdt_testlib import ctx
from tests.http.support import issue, op

CHARACTERS = 100_000
"""Characters per insert-and-delete."""

ROUNDS = 8
"""Inserts-and-deletes before the restore."""


@pytest.fixture
def http_parser() -> str:
    return "httptools"


async def test_a_restore_steps_through_what_the_texts_show_not_their_past(
    make_server: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted as the element ids the restore spells out (one per element it
    stepped through): a few per run, not one per character ever typed."""
    spelt: list[int] = []

    def counted(client: int, counter: int) -> str:
        spelt.append(counter)
        return format_id(client, counter)

    monkeypatch.setattr(rga_type, "format_id", counted)
    server = await make_server(rate_limit=1_000_000)
    async with httpx.AsyncClient(base_url=server.url, timeout=300) as client:
        headers = await issue(client)
        for _ in range(ROUNDS):
            body = {"op": "insert", "index": 0, "text": "x" * CHARACTERS}
            r = await op(client, headers, "rg:past", body)
            assert r.status_code == 200, r.text
            r = await op(
                client, headers, "rg:past", {"op": "delete", "index": 0, "count": CHARACTERS}
            )
            assert r.status_code == 200, r.text
        r = await op(client, headers, "rg:past", {"op": "insert", "index": 0, "text": "ab"})
        then = r.json()["seq"]
        r = await op(client, headers, "rg:past", {"op": "insert", "index": 1, "text": "c"})
        assert r.status_code == 200, r.text
        spelt.clear()
        r = await client.post(
            "/v1/namespaces/app/crdts/rg:past/restore", json={"seq": then}, headers=headers
        )
        assert r.status_code == 200, r.text
        assert r.json()["applied"] == 1
        r = await client.get("/v1/namespaces/app/crdts/rg:past", headers=headers)
        assert r.json()["text"] == "ab"
    # A step per run (one id each, the last): a hundred or so here. A step
    # per element ever inserted spelt out 800,003 ids.
    assert len(spelt) < 1000, len(spelt)


def test_restore_ops_between_runs_cut_every_way() -> None:
    """Inserts and deletes in every part of runs (deleted, visible, partly
    both; of several writers) restore to the target's text."""
    seq_ctx = iter(range(1, 10_000))
    now = Rga.new()

    def apply(op: dict[str, Any], client: int = 7) -> None:
        now.apply_op(op, ctx(client, seq=next(seq_ctx)))

    apply({"op": "insert", "index": 0, "text": "abcdefghij"})
    apply({"op": "insert", "index": 5, "values": [1, [2], {"three": 3}]}, client=8)
    apply({"op": "delete", "index": 2, "count": 3})
    apply({"op": "insert", "index": 0, "text": "XY"}, client=9)
    target = now.clone()
    apply({"op": "delete", "index": 1, "count": 6})
    apply({"op": "insert", "index": 2, "text": "new"}, client=8)
    apply({"op": "delete", "index": 0, "count": 1})
    apply({"op": "insert", "index": 0, "text": "front"})
    for restoring in now.restore_ops(target):
        apply(restoring)
    assert now.view(0) == target.view(0)
