"""A store written when canonical JSON wrote 1.0 as ``1.0`` (so 1 and 1.0 were
two set elements) is read by this server as one element, from a snapshot and
from the log alike, and removing it as 1 removes it.

The server before the change is this server with the set's identity function
put back as it was: the store holds values, not identities, so that is the
whole difference."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import syncd.crdt.orset
from syncd.client import AsyncClient
from syncd.crdt.validate import check_json
from tests.client.conftest import NS, make_token


def _old_canonical_json(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def _old_json_value(value: Any, field: str, max_bytes: int | None = None) -> str:
    check_json(value, field)
    return _old_canonical_json(value)


ADDS = [1, 1.0, {"x": 2.5, "n": 1e16}, "a"]
REMOVES = [1, {"n": 10**16, "x": 2.5}]


@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_old_store_with_float_elements_is_one_identity(
    make_server: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "store"
    token = make_token(5)
    monkeypatch.setattr(syncd.crdt.orset, "canonical_json", _old_canonical_json)
    monkeypatch.setattr(syncd.crdt.orset, "json_value", _old_json_value)
    old = await make_server(data_dir=data_dir)
    async with AsyncClient(old.url, token, NS) as client:
        for element in ADDS:
            await client.apply("or:snap", {"op": "add", "element": element})
        await old.app.store.compact_now()
        for element in ADDS:
            await client.apply("or:log", {"op": "add", "element": element})
        for crdt_id in ("or:snap", "or:log"):
            held = await client.read(crdt_id)
            assert held is not None and len(held["value"]) == 4, held  # 1 and 1.0 apart
    await old.server.shutdown()
    monkeypatch.undo()

    new = await make_server(data_dir=data_dir)
    async with AsyncClient(new.url, token, NS) as client:
        for crdt_id in ("or:snap", "or:log"):
            held = await client.read(crdt_id)
            assert held is not None and held["value"] == ["a", 1, {"n": 1e16, "x": 2.5}], held
            for element in REMOVES:
                await client.apply(crdt_id, {"op": "remove", "element": element})
            after = await client.read(crdt_id)
            assert after is not None and after["value"] == ["a"], (crdt_id, after)
