"""A subscription that starts while its CRDT is being deleted on this node and
created again on another (real servers on real sockets, on the suite's
PostgreSQL): it starts from the new life, from a snapshot or resuming it
(``since``/``epoch``), and never says ``deleted`` of the life before, which
its start already left behind. SSE and WebSocket."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
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
Stream = Callable[[RunningServer, dict[str, Any]], contextlib.AbstractAsyncContextManager[Next]]


@pytest.fixture
def http_parser() -> str:
    return "h11"


async def _add(http: httpx.AsyncClient, element: str) -> None:
    answer = await http.post(f"{PATH}/ops", json={"op": "add", "element": element})
    assert answer.status_code == 200, answer.text


@contextlib.asynccontextmanager
async def _sse(node: RunningServer, resume: dict[str, Any]) -> AsyncIterator[Next]:
    query = "&".join(f"{k}={v}" for k, v in resume.items())
    # The answer's head comes once the stream has its start (after the delete).
    opening = asyncio.create_task(
        SseReader.open(node.port, f"{PATH}/events" + (f"?{query}" if query else ""), AUTH)
    )
    sse: SseReader | None = None

    async def delta() -> dict[str, Any]:
        nonlocal sse
        if sse is None:
            sse, status, _ = await opening
            assert status == 200
        return await sse.event()

    try:
        yield delta
    finally:
        if sse is not None:
            sse.close()
        opening.cancel()


@contextlib.asynccontextmanager
async def _ws(node: RunningServer, resume: dict[str, Any]) -> AsyncIterator[Next]:
    async with connect(ws_url(node, ADMIN, ns=NS), proxy=None, ping_interval=None) as ws:
        await send_mp(ws, {"kind": "subscribe", "id": "or:s", **resume})

        async def delta() -> dict[str, Any]:
            while (message := await recv(ws))["kind"] not in DELTAS:
                pass
            return message

        yield delta


@pytest.mark.parametrize("resuming", [False, True], ids=["snapshot", "resume"])
@pytest.mark.parametrize("stream", [_sse, _ws], ids=["sse", "ws"])
async def test_a_stream_started_during_a_delete_begins_at_the_new_life_without_a_stale_deleted(
    make_server: Callable[..., Any], pg_url: str, stream: Stream, resuming: bool
) -> None:
    a: RunningServer = await make_server(database_url=pg_url, node_id="a")
    b: RunningServer = await make_server(database_url=pg_url, node_id="b")
    async with (
        httpx.AsyncClient(base_url=a.url, headers=AUTH) as on_a,
        httpx.AsyncClient(base_url=b.url, headers=AUTH) as on_b,
        contextlib.AsyncExitStack() as streams,
    ):
        await _add(on_a, "old")
        store = a.app.store
        append = store.append
        epoch = ""
        deltas: list[Next] = []

        async def subscribe(resume: dict[str, Any]) -> None:
            deltas.append(await streams.enter_async_context(stream(a, resume)))
            while not a.app.hub.subscribed(NS, "or:s"):
                await asyncio.sleep(0.001)

        async def append_then_b_writes(records: Sequence[dict[str, Any]]) -> None:
            # A has dropped the CRDT; while its delete becomes durable, and
            # before its delete call returns (and publishes its "deleted"), B
            # starts the next life. A client subscribes on A from nothing
            # before that, or after it resuming the new life at seq 1 (learnt
            # on B). Its start waits for the delete.
            nonlocal epoch
            if not resuming:
                await subscribe({})
            await append(records)
            await _add(on_b, "new")
            entry = b.app.engine.get(NS, "or:s")
            assert entry is not None and entry.seq == 1
            epoch = entry.epoch
            if resuming:
                await subscribe({"since": 1, "epoch": epoch})

        store.append = append_then_b_writes  # type: ignore[method-assign]
        answer = await on_a.delete(PATH)
        store.append = append  # type: ignore[method-assign]
        assert answer.status_code in (200, 204)
        delta = deltas[0]
        await _add(on_b, "newer")
        await _add(on_b, "newest")
        seen = [await delta()]
        while seen[-1]["kind"] == "deleted" or seen[-1]["seq"] < 3:
            seen.append(await delta())
        # A "deleted" came here (of the life the stream's start left behind),
        # then ops of a life the client took for ended.
        got = [(d["kind"], d.get("epoch"), d.get("seq")) for d in seen]
        starts = [] if resuming else [("snapshot", epoch, seen[0].get("seq"))]
        first_op = 2 if resuming else (seen[0].get("seq") or 0) + 1
        assert got == [*starts, *(("op", epoch, seq) for seq in range(first_op, 4))], got
