"""``apply_retrying`` with a caller's ``op_id`` near the 128-character limit:
the ids it derives for a batch's ops (``<op_id>.<i>``) must stay within the
limit (else the service refuses the batch with 400), and stay the same on
every call with that ``op_id`` (else a retry would apply the ops again)."""

from __future__ import annotations

import asyncio

import pytest

from syncd.client import AsyncClient, Client, ops
from syncd.client.retry import with_op_ids
from syncd.crdt.engine import OP_ID_MAX_LEN
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

LONG = "k" * OP_ID_MAX_LEN


def _batch(n: int = 12) -> list[ops.Op]:
    return [ops.gcounter_increment(1) for _ in range(n)]


@pytest.mark.parametrize("op_id", [LONG, "k" * (OP_ID_MAX_LEN - 2), "é" * OP_ID_MAX_LEN])
async def test_a_long_op_id_batch_applies_once(server: RunningServer, op_id: str) -> None:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        first = await client.apply_retrying("gc:long", _batch(), op_id=op_id)
        again = await client.apply_retrying("gc:long", _batch(), op_id=op_id)
        assert first["applied"] == 12 and "duplicate" not in first
        assert again["duplicate"] is True and again["seq"] == first["seq"]
        view = await client.read("gc:long")
        assert view is not None and view["value"] == 12


async def test_the_blocking_client_too(server: RunningServer) -> None:
    def run() -> None:
        with Client(server.url, make_token(3), NS) as client:
            first = client.apply_retrying("gc:long-sync", _batch(3), op_id=LONG)
            again = client.apply_retrying("gc:long-sync", _batch(3), op_id=LONG)
            assert again["duplicate"] is True and again["seq"] == first["seq"]
            view = client.read("gc:long-sync")
            assert view is not None and view["value"] == 3

    await asyncio.to_thread(run)


def test_derived_ids_fit_are_distinct_and_stable() -> None:
    for op_id in (LONG, "k" * (OP_ID_MAX_LEN - 2), "x"):
        derived = with_op_ids(_batch(1001), op_id)
        assert isinstance(derived, list)
        ids = [op["op_id"] for op in derived]
        assert all(1 <= len(i) <= OP_ID_MAX_LEN for i in ids)
        assert len(set(ids)) == len(ids) and op_id not in ids
        assert ids == [op["op_id"] for op in with_op_ids(iter(_batch(1001)), op_id)]
    # Short ids keep their readable form (and what earlier versions sent).
    assert [op["op_id"] for op in with_op_ids(_batch(2), "k")] == ["k.0", "k.1"]
    # Two long ids that differ only past the cut do not share derived ids.
    a = with_op_ids(_batch(1), LONG)
    b = with_op_ids(_batch(1), LONG[:-1] + "j")
    assert isinstance(a, list) and isinstance(b, list)
    assert a[0]["op_id"] != b[0]["op_id"]
