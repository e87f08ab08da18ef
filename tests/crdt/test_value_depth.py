"""JSON values inside ops may nest 64 levels, in every type alike
(docs/data-model.md#ops: set elements, register values, data objects, rga
values). An rga's ``values`` array is the op's field, not one of the values:
its own level is not one of a value's 64."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from syncd.client import AsyncClient
from syncd.client.errors import ServiceError
from syncd.crdt.validate import MAX_JSON_DEPTH
from tests.client.conftest import NS, make_token


def nested(levels: int) -> Any:
    """A JSON value of ``levels`` nested arrays (0: a number)."""
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def ops_at(levels: int) -> dict[str, dict[str, Any]]:
    """One op per type whose JSON value nests ``levels`` levels."""
    return {
        "or:set": {"op": "add", "element": nested(levels)},
        "lw:reg": {"op": "set", "value": nested(levels)},
        "rg:seq": {"op": "insert", "index": 0, "values": [nested(levels)]},
        "tr:tree": {"op": "add", "id": f"n{levels}", "data": {"k": nested(levels - 1)}},
    }


@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_a_value_of_64_levels_is_taken_by_every_type_and_65_by_none(
    make_server: Callable[..., Any],
) -> None:
    # The body nests the value two or three levels deeper than the value itself.
    server = await make_server(json_max_depth=MAX_JSON_DEPTH + 8)
    async with AsyncClient(server.url, make_token(5), NS) as client:
        for crdt_id, op in ops_at(MAX_JSON_DEPTH).items():
            await client.apply(crdt_id, op)
        read = await client.read("rg:seq")
        assert read is not None and read["value"] == [nested(MAX_JSON_DEPTH)]
        for crdt_id, op in ops_at(MAX_JSON_DEPTH + 1).items():
            with pytest.raises(ServiceError) as refused:
                await client.apply(crdt_id, op)
            assert refused.value.code == "invalid_op", crdt_id
            assert f"nested deeper than {MAX_JSON_DEPTH} levels" in refused.value.message
