"""A ``Replica.follow`` (``client.replica``) given up on before its first
snapshot came (a timeout while the service is down) stops its stream: it used
to leave the stream's task behind, reconnecting for ever in the background."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from syncd.client import AsyncClient, Replica
from tests.client.conftest import NS, make_token


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_a_follow_timed_out_leaves_no_task_behind(
    make_server: Callable[..., Any], via: str
) -> None:
    server = await make_server()
    url = server.url
    await server.server.shutdown()  # the service is down: no snapshot will come
    before = asyncio.all_tasks()
    async with AsyncClient(url, make_token(3), NS, timeout=1.0) as client:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(
                Replica.follow(client, "gc:down", via=via, backoff_max_s=0.05), 0.3
            )
        await asyncio.sleep(0.1)
        left = [task for task in asyncio.all_tasks() - before if not task.done()]
        assert left == []
