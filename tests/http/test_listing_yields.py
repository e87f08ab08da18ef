"""A listing that skips ids the caller may not read goes on over many store
pages (docs/http-api.md#listing-crdts): a token that reads one id of a large
namespace makes one request look at all of it. The embedded store answers a
page without waiting, so those pages ran back to back on the event loop, and
every other connection of the server stood still until the last (12 s for a
namespace of 100,000 CRDTs). The listing lets the loop run between pages."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from itertools import pairwise
from typing import Any

import httpx

from syncd.crdt.engine import MAX_LIST_LIMIT
from tests.conftest import ADMIN, RunningServer
from tests.http.support import issue

STORE_PAGES = 2
IDS = MAX_LIST_LIMIT * (STORE_PAGES - 1) + 1
"""Enough CRDTs for the listing to read ``STORE_PAGES`` pages of the store."""
CREATE_AT_ONCE = 500


async def fill(server: RunningServer) -> None:
    """``IDS`` counters, written through the service as the ops route does."""
    service = server.app.service
    admin = server.app.auth.authenticate(f"Bearer {ADMIN}", "app")
    for start in range(0, IDS, CREATE_AT_ONCE):
        await asyncio.gather(
            *(
                service.apply_ops("app", f"gc:{n:05d}", {"op": "increment"}, admin, "http")
                for n in range(start, min(IDS, start + CREATE_AT_ONCE))
            )
        )


async def test_the_loop_runs_between_the_store_pages_of_one_listing(
    server: RunningServer,
) -> None:
    await fill(server)
    store = server.app.service.store
    ticks = 0
    seen: list[int] = []  # the ticks at each store page
    real_list_ids: Callable[..., Awaitable[Any]] = store.list_ids

    async def counted(*args: Any) -> Any:
        seen.append(ticks)
        return await real_list_ids(*args)

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    store.list_ids = counted  # type: ignore[method-assign]
    ticker = asyncio.create_task(tick())
    try:
        async with httpx.AsyncClient(base_url=server.url) as http:
            headers = await issue(http, read=["gc:none"], write=[])
            seen.clear()
            answer = await http.get("/v1/namespaces/app/crdts", headers=headers)
    finally:
        ticker.cancel()
        del store.list_ids
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"crdts": [], "next": None}
    assert len(seen) == STORE_PAGES
    # Each store page after the first comes after the loop ran other work.
    assert all(later > earlier for earlier, later in pairwise(seen)), seen
