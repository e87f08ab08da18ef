"""A replica whose applying of a delta fails (a delta it cannot take: a type
this client does not know, a state it cannot load) stops, and its stream ends
with it: the stream stayed connected (and reconnecting) until ``close()``,
which a caller that saw the failure only through ``changes()`` or
``wait_for_seq`` had no reason to call. Against the real server."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from syncd.client import AsyncClient, Replica, ops
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

WAIT_S = 10.0


class _Broken(Replica):
    """Fails on the first op delta, as an unloadable delta would."""

    def apply(self, delta: Mapping[str, Any]) -> bool:
        if delta.get("kind") == "op":
            raise ValueError("cannot apply this delta")
        return super().apply(delta)


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_a_replica_stopped_by_a_failed_apply_ends_its_stream(
    server: RunningServer, via: str
) -> None:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        before = asyncio.all_tasks()
        replica = await _Broken.follow(client, "gc:hits", via=via)
        feed = replica.changes()
        await client.apply("gc:hits", ops.gcounter_increment())
        with pytest.raises(ValueError, match="cannot apply"):
            async with asyncio.timeout(WAIT_S):
                await feed.__anext__()
        async with asyncio.timeout(WAIT_S):
            while left := [task for task in asyncio.all_tasks() - before if not task.done()]:
                await asyncio.sleep(0.02)
        assert left == []
        await replica.close()  # still fine to call
