"""A node whose pooled connections are all taken (many slow requests) is busy,
not cut off from PostgreSQL: a batch that found no free connection in time is
answered 503, and the node stays ready and takes the next write. In-process
node on the suite's PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from syncd.errors import ApiError
from tests.store.pgnodes import NS, StartNode, op

pytestmark = pytest.mark.timeout(60)

COMMIT_TIMEOUT_S = 5.0
"""Past the pool's checkout wait (connect timeout + 1 s, 4 s): the batch
waits for a connection, tries once more and then gives up."""


async def test_a_batch_that_finds_no_free_connection_leaves_the_node_ready(
    start_node: StartNode,
) -> None:
    a = await start_node("a", pool_size=2, commit_timeout_s=COMMIT_TIMEOUT_S)
    await op(a, "gc:busy", {"op": "increment"})
    assert a.ready
    unready = 0
    stop = asyncio.Event()

    async def watch() -> None:
        nonlocal unready
        while not stop.is_set():
            unready += not a.ready
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    try:
        pool = a.store.pool  # type: ignore[attr-defined]
        async with pool.connection(), pool.connection():  # every pooled connection, held
            with pytest.raises(ApiError) as refused:
                await op(a, "gc:busy", {"op": "increment"})
            assert refused.value.status == 503
            await asyncio.sleep(0.5)  # a probe or two
        assert (await op(a, "gc:busy", {"op": "increment"})).seq == 2
    finally:
        stop.set()
        with contextlib.suppress(BaseException):
            await watcher
    assert unready == 0, f"not ready in {unready} samples while only the pool was busy"


async def test_a_delete_that_finds_no_free_connection_leaves_the_node_ready(
    start_node: StartNode,
) -> None:
    a = await start_node("a", pool_size=2, commit_timeout_s=COMMIT_TIMEOUT_S)
    await op(a, "gc:gone", {"op": "increment"})
    unready = 0
    stop = asyncio.Event()

    async def watch() -> None:
        nonlocal unready
        while not stop.is_set():
            unready += not a.ready
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    try:
        pool = a.store.pool  # type: ignore[attr-defined]
        async with pool.connection(), pool.connection():
            with pytest.raises(ApiError) as refused:
                await a.service.delete(NS, "gc:gone")
            assert refused.value.status == 503
            await asyncio.sleep(0.5)
        assert await a.service.delete(NS, "gc:gone")
    finally:
        stop.set()
        with contextlib.suppress(BaseException):
            await watcher
    assert unready == 0, f"not ready in {unready} samples while only the pool was busy"
