"""A set element the Python client writes as a float (1.0, 1e16) is the element
another client names as an integer (what a JavaScript client reads and sends
back): the server and the Python client's replica agree on it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from syncd.client import AsyncClient, ops
from tests.client.conftest import NS, make_token

WAIT_S = 10.0


@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_float_written_element_is_removed_by_its_integer(
    make_server: Callable[..., Any],
) -> None:
    server = await make_server()
    async with (
        AsyncClient(server.url, make_token(21), NS) as py,
        AsyncClient(server.url, make_token(22), NS) as other,
    ):
        await py.apply("or:n", ops.orset_add(1.0))
        async with await py.replica("or:n", "orset") as replica:
            await py.apply("or:n", ops.orset_add({"big": 1e16, "small": 1e-7, "half": 0.5}))
            await other.apply("or:n", ops.orset_add(1))
            await other.apply("or:n", ops.orset_add("kept"))
            await other.apply("or:n", ops.orset_remove(1))
            last = await other.apply(
                "or:n", ops.orset_remove({"half": 0.5, "small": 1e-7, "big": 10**16})
            )
            assert (await py.read("or:n") or {})["value"] == ["kept"]
            await replica.wait_for_seq(last["seq"], WAIT_S)
            assert replica.view() == await py.read("or:n")
            full = await py.fetch("or:n", crdt_format=True)
            assert replica.state() == full["state"]
