"""An element id has one spelling (docs/data-model.md#rga: ``"<counter>@<client_id>"``):
the element ``1@0`` of client 0 (a valid token client id) is not also ``1@-0``,
as ``7@1`` is not ``07@1``. An op naming ``1@-0`` names no element: 400."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from syncd.client import AsyncClient
from syncd.client.errors import ServiceError
from syncd.crdt.rga.ids import parse_id, parse_ids
from syncd.errors import ApiError
from tests.client.conftest import NS, make_token


@pytest.mark.parametrize("spelling", ["1@-0", "1@-00", "1@00", "01@0"])
def test_other_spellings_of_an_id_do_not_parse(spelling: str) -> None:
    with pytest.raises(ApiError):
        parse_id(spelling, "after")
    with pytest.raises(ApiError):
        parse_ids(["2@0", spelling], "ids")
    assert parse_id("1@0", "after") == (0, 1)
    assert parse_id("1@-3", "after") == (-3, 1)


@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_client_zeros_element_is_named_one_way_only(
    make_server: Callable[..., Any],
) -> None:
    server = await make_server()
    async with AsyncClient(server.url, make_token(0), NS) as client:
        answer = await client.apply("rg:doc", {"op": "insert", "index": 0, "text": "ab"})
        assert answer["ids"] == ["1@0", "2@0"]
        for op in (
            {"op": "insert", "after": "1@-0", "text": "x"},
            {"op": "delete", "ids": ["1@-0"]},
            {"op": "delete", "ids": ["2@0", "1@-0"]},
        ):
            with pytest.raises(ServiceError) as refused:
                await client.apply("rg:doc", op)
            assert refused.value.status == 400 and refused.value.code == "invalid_op", op
        read = await client.read("rg:doc")
        assert read is not None and read["text"] == "ab"
