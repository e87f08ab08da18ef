"""``ttl_ms`` is optional (docs/data-model.md#presence): a ``null`` one is of
the wrong type and is refused saying what it must be, not that it is required."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from syncd.client import AsyncClient
from syncd.client.errors import ServiceError
from tests.client.conftest import NS, make_token


@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_a_null_ttl_is_refused_as_not_an_integer(make_server: Callable[..., Any]) -> None:
    server = await make_server()
    async with AsyncClient(server.url, make_token(5), NS) as client:
        with pytest.raises(ServiceError) as refused:
            await client.apply("pr:room", {"op": "update", "data": {"a": 1}, "ttl_ms": None})
        assert refused.value.code == "invalid_op"
        assert refused.value.message == "ttl_ms: must be an integer from 1000 to 300000"
        await client.apply("pr:room", {"op": "update", "data": {"a": 1}})
        read = await client.read("pr:room")
        assert read is not None and read["value"] == {"5": {"a": 1}}
