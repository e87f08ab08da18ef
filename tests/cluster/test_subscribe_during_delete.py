"""A subscription that starts while its CRDT is being deleted on this node and
created again on another (real servers on real sockets, on the suite's
PostgreSQL): it starts from the new life and never says ``deleted`` of the
life before, which its snapshot already left behind. SSE and WebSocket."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.conftest import ADMIN, RunningServer
from tests.http.test_events import SseReader
from tests.ws.support import recv, send_mp, ws_url

pytestmark = pytest.mark.timeout(60)

NS = "sd"
AUTH = {"authorization": f"Bearer {ADMIN}"}
PATH = f"/v1/namespaces/{NS}/crdts/or:s"
DELTAS = ("snapshot", "op", "deleted")

Next = Callable[[], Any]


@pytest.fixture
def http_parser() -> str:
    return "h11"


async def _add(http: httpx.AsyncClient, element: str) -> None:
    answer = await http.post(f"{PATH}/ops", json={"op": "add", "element": element})
    assert answer.status_code == 200, answer.text


@asynccontextmanager
async def _sse(node: RunningServer) -> AsyncIterator[Next]:
    sse, status, _ = await SseReader.open(node.port, f"{PATH}/events", AUTH)
    assert status == 200
    try:
        yield sse.event
    finally:
        sse.close()


@asynccontextmanager
async def _ws(node: RunningServer) -> AsyncIterator[Next]:
    async with connect(ws_url(node, ADMIN, ns=NS), proxy=None, ping_interval=None) as ws:
        await send_mp(ws, {"kind": "subscribe", "id": "or:s"})

        async def delta() -> dict[str, Any]:
            while (message := await recv(ws))["kind"] not in DELTAS:
                pass
            return message

        yield delta


@pytest.mark.parametrize("stream", [_sse, _ws], ids=["sse", "ws"])
async def test_a_stream_started_during_a_delete_begins_at_the_new_life_without_a_stale_deleted(
    make_server: Callable[..., Any], pg_url: str, stream: Callable[..., Any]
) -> None:
    a: RunningServer = await make_server(database_url=pg_url, node_id="a")
    b: RunningServer = await make_server(database_url=pg_url, node_id="b")
    async with (
        httpx.AsyncClient(base_url=a.url, headers=AUTH) as on_a,
        httpx.AsyncClient(base_url=b.url, headers=AUTH) as on_b,
    ):
        await _add(on_a, "old")
        # A's delete is durable; before A's delete call returns (and publishes
        # its "deleted"), B starts the next life.
        store = a.app.store
        append = store.append

        async def append_then_b_writes(records: Sequence[dict[str, Any]]) -> None:
            await append(records)
            await _add(on_b, "new")

        store.append = append_then_b_writes  # type: ignore[method-assign]
        deleting = asyncio.create_task(on_a.delete(PATH))
        while a.app.engine.get(NS, "or:s") is not None:  # A dropped it: under way
            await asyncio.sleep(0.001)
        # The stream subscribes now, and loads the CRDT once the delete is done.
        async with stream(a) as delta:
            assert (await deleting).status_code in (200, 204)
            store.append = append  # type: ignore[method-assign]
            first = await delta()
            assert (first["kind"], first["seq"]) == ("snapshot", 1), first
            await _add(on_b, "newer")
            following = await delta()
            # It was {"kind": "deleted"} here (of the life before the snapshot's),
            # then this op of a life the client took for ended.
            assert (following["kind"], following.get("seq"), following.get("epoch")) == (
                "op",
                2,
                first["epoch"],
            ), following
