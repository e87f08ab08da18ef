"""A store written before set dots kept forms (re-add deltas without ``form``,
states without ``forms``) reads the same after a restart on this server, from
a snapshot and from the log alike: add ``1.0`` then ``1`` still reads ``1.0``
(docs/data-model.md#orset).

The server before the change is this server with ``form`` left out of the
deltas it writes: a set of one server never had dots in two forms, so its
states were already what an earlier version wrote."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from syncd.client import AsyncClient
from syncd.crdt.base import OpContext
from syncd.crdt.orset import ORSet
from syncd.crdt.validate import shown_json
from tests.client.conftest import NS, make_token

ADDS = [1.0, 1, [2.5, 1.0], [2.5, 1], "a"]
"""Two elements written two ways each: each reads in its first form."""

SHOWN = '["a",1.0,[2.5,1.0]]'


def _old_apply_op(self: ORSet, op: Mapping[str, Any], ctx: OpContext) -> dict[str, Any]:
    delta = _apply_op(self, op, ctx)
    delta.pop("form", None)
    return delta


_apply_op = ORSet.apply_op


@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_an_old_store_reads_the_same_forms_after_a_restart(
    make_server: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "store"
    token = make_token(5)
    monkeypatch.setattr(ORSet, "apply_op", _old_apply_op)
    old = await make_server(data_dir=data_dir)
    held: dict[str, Any] = {}
    async with AsyncClient(old.url, token, NS) as client:
        for element in ADDS:
            await client.apply("or:snap", {"op": "add", "element": element})
        await old.app.store.compact_now()
        for element in ADDS:
            await client.apply("or:log", {"op": "add", "element": element})
        for crdt_id in ("or:snap", "or:log"):
            read = await client.read(crdt_id)
            assert read is not None and shown_json(read["value"]) == SHOWN, read
            held[crdt_id] = await client.read_state(crdt_id)
            assert "forms" not in held[crdt_id]["state"]
    await old.server.shutdown()
    monkeypatch.undo()

    new = await make_server(data_dir=data_dir)
    async with AsyncClient(new.url, token, NS) as client:
        for crdt_id in ("or:snap", "or:log"):
            read = await client.read(crdt_id)
            assert read is not None and shown_json(read["value"]) == SHOWN, (crdt_id, read)
            state = await client.read_state(crdt_id)
            assert shown_json(state) == shown_json(held[crdt_id]), crdt_id
            # A re-add now says which form it keeps: still the first.
            await client.apply(crdt_id, {"op": "add", "element": [2.5, 1]})
            read = await client.read(crdt_id)
            assert read is not None and shown_json(read["value"]) == SHOWN, (crdt_id, read)
