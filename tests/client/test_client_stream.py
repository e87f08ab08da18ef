"""subscribe (WebSocket) and events (SSE) against the real server: deltas,
gaps, refusals, and resuming across a server restart without losing or
repeating a seq."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from syncd.client import (
    AsyncClient,
    Client,
    MessageTooLargeError,
    ServiceError,
    TokenExpiredError,
    TokenRevokedError,
)
from syncd.client.stream import EventStream, Subscription
from tests.client.conftest import NS, make_token, now_ms
from tests.conftest import ADMIN, RunningServer, Subprocess

WAIT_S = 10.0
"""Upper bound on waiting for something the server does promptly."""

Stream = Subscription | EventStream


def open_stream(client: AsyncClient, via: str, crdt_id: str, **options: Any) -> Stream:
    if via == "ws":
        return client.subscribe([crdt_id], **options)
    return client.events(crdt_id, **options)


async def take(stream: AsyncIterator[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    async with asyncio.timeout(WAIT_S):
        return [await anext(stream) for _ in range(n)]


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(server.url, make_token(2), NS) as c:
        yield c


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_snapshot_then_ops(client: AsyncClient, via: str) -> None:
    await client.gcounter_increment("gc:a", 2)
    async with open_stream(client, via, "gc:a") as stream:
        (snapshot,) = await take(stream, 1)
        assert snapshot["kind"] == "snapshot" and snapshot["seq"] == 1
        assert snapshot["state"] is not None and snapshot["epoch"]
        await client.gcounter_increment("gc:a", 3)
        await client.gcounter_increment("gc:a", 4)
        ops = await take(stream, 2)
        assert [(d["kind"], d["seq"]) for d in ops] == [("op", 2), ("op", 3)]
        assert stream.position("gc:a") == (3, snapshot["epoch"])


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_unknown_id_then_created_deleted_recreated(
    client: AsyncClient, server: RunningServer, via: str
) -> None:
    async with open_stream(client, via, "or:new") as stream:
        (snapshot,) = await take(stream, 1)
        assert (snapshot["seq"], snapshot["state"], snapshot["type"]) == (0, None, "orset")
        await client.orset_add("or:new", 1)
        (first,) = await take(stream, 1)
        assert (first["kind"], first["seq"]) == ("op", 1)
        async with AsyncClient(server.url, make_token(1, admin=True), NS) as admin:
            await admin.delete_crdt("or:new")
        (deleted,) = await take(stream, 1)
        assert deleted["kind"] == "deleted"
        await client.orset_add("or:new", 2)
        (again,) = await take(stream, 1)
        assert (again["kind"], again["seq"]) == ("op", 1) and again["epoch"] != first["epoch"]


async def test_subscribe_several_ids_on_one_socket(client: AsyncClient) -> None:
    async with client.subscribe(["gc:x", "or:y", "gc:x"]) as sub:
        assert sub.ids == ["gc:x", "or:y"]
        first = await take(sub, 2)
        assert {d["id"] for d in first} == {"gc:x", "or:y"}
        await client.orset_add("or:y", "e")
        await client.gcounter_increment("gc:x")
        got = await take(sub, 2)
        assert sorted((d["id"], d["seq"]) for d in got) == [("gc:x", 1), ("or:y", 1)]
        assert sub.connects == 1
    with pytest.raises(ValueError):
        client.subscribe([])


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_a_gap_resubscribes_and_fills_in(client: AsyncClient, via: str) -> None:
    for _ in range(3):
        await client.gcounter_increment("gc:g")
    async with open_stream(client, via, "gc:g") as stream:
        await take(stream, 1)  # snapshot at 3
        # Lose deltas 2 and 3 as far as the client knows: the next one is a gap.
        stream._tracker.position("gc:g").seq = 1
        await client.gcounter_increment("gc:g")
        got = await take(stream, 3)
        assert [(d["kind"], d["seq"]) for d in got] == [("op", 2), ("op", 3), ("op", 4)]
        assert stream.resyncs == 1


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_refusals_end_the_stream(server: RunningServer, via: str) -> None:
    async with AsyncClient(server.url, make_token(3, read=("gc:*",)), NS) as client:
        stream = open_stream(client, via, "or:secret")
        with pytest.raises(ServiceError) as info:
            await take(stream, 1)
        assert info.value.code == "forbidden" and info.value.status == 403
        with pytest.raises(StopAsyncIteration):
            await anext(stream)


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_expired_token_is_not_sent_on_reconnect(server: RunningServer, via: str) -> None:
    clock = [0]
    token = make_token(3)
    async with AsyncClient(server.url, token, NS, clock_ms=lambda: clock[0] or now_ms()) as client:
        stream = open_stream(client, via, "gc:t")
        await take(stream, 1)
        clock[0] = 2**62  # the token expires while connected
        await stream._disconnect()  # the connection drops
        with pytest.raises(TokenExpiredError):
            await take(stream, 1)
        with pytest.raises(StopAsyncIteration):
            await anext(stream)


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_a_revoked_token_ends_the_stream_with_token_revoked(
    server: RunningServer, via: str
) -> None:
    """The service ends the stream (SSE: its ``end`` event; WebSocket: an
    ``error``, then close 4401); the iteration raises instead of reconnecting."""
    async with AsyncClient(server.url, make_token(5), NS) as client:
        stream = open_stream(client, via, "gc:r", backoff_max_s=0.05)
        assert [d["kind"] for d in await take(stream, 1)] == ["snapshot"]
        r = await client.http.post(
            f"{server.url}/v1/namespaces/{NS}/revocations",
            json={"client_id": 5},
            headers={"authorization": f"Bearer {ADMIN}"},
        )
        assert r.status_code == 200, r.text
        with pytest.raises(TokenRevokedError) as info:
            await take(stream, 1)
        assert (info.value.status, info.value.code) == (401, "token_revoked")
        assert isinstance(info.value, ServiceError) and stream.connects == 1
        with pytest.raises(StopAsyncIteration):
            await anext(stream)
        with pytest.raises(TokenRevokedError):  # and so is every request
            await client.fetch("gc:r")


async def test_an_expired_token_ends_the_sse_stream_with_token_expired(
    server: RunningServer,
) -> None:
    """The ``end`` event of an expiry: not a delta, and not a reason to reconnect."""
    async with AsyncClient(server.url, make_token(6, ttl_ms=1500), NS) as client:
        stream = client.events("gc:e", backoff_max_s=0.05)
        assert [d["kind"] for d in await take(stream, 1)] == ["snapshot"]
        with pytest.raises(ServiceError) as info:
            await take(stream, 1)
        assert (info.value.status, info.value.code) == (401, "token_expired")
        assert stream.connects == 1


async def test_blocking_stream(server: RunningServer, client: AsyncClient) -> None:
    await client.gcounter_increment("gc:b")

    def run() -> list[tuple[str, int]]:
        with Client(server.url, make_token(4), NS) as c, c.subscribe(["gc:b"]) as sub:
            first = sub.next(timeout=WAIT_S)
            c.gcounter_increment("gc:b")
            second = sub.next(timeout=WAIT_S)
            with c.events("gc:b") as events:
                third = events.next(timeout=WAIT_S)
            return [(d["kind"], d["seq"]) for d in (first, second, third)]

    assert await asyncio.to_thread(run) == [("snapshot", 1), ("op", 2), ("snapshot", 2)]


async def test_blocking_stream_raises_the_stream_error(server: RunningServer) -> None:
    def run() -> None:
        with Client(server.url, make_token(4, read=()), NS) as c, c.events("gc:b") as events:
            with pytest.raises(ServiceError):
                next(events)
            with pytest.raises(StopIteration):
                next(events)

    await asyncio.to_thread(run)


# -- a real restart -----------------------------------------------------------


async def _collect(stream: Stream, into: list[dict[str, Any]]) -> None:
    async for delta in stream:
        into.append(delta)


async def _wait_for(predicate: Callable[[], bool], task: asyncio.Task[None]) -> None:
    async with asyncio.timeout(WAIT_S * 2):
        while not predicate():
            if task.done():
                task.result()  # the collector's error, if any
                raise AssertionError("the stream ended")
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("via", ["ws", "sse"])
@pytest.mark.parametrize("how", ["terminate", "kill"])
async def test_resumes_across_a_server_restart(
    spawn_server: Callable[..., Subprocess], via: str, how: str
) -> None:
    env = {"SERVICE_FSYNC": "batch"}
    proc = spawn_server(env)
    port = proc.port
    crdt_id = "gc:restart"
    got: list[dict[str, Any]] = []
    async with AsyncClient(proc.url, make_token(5), NS, timeout=2.0) as writer:
        for _ in range(3):
            await writer.gcounter_increment(crdt_id)
        stream = open_stream(writer, via, crdt_id, backoff_base_s=0.02, backoff_max_s=0.3)
        task = asyncio.create_task(_collect(stream, got))
        try:
            await _wait_for(lambda: len(got) == 1, task)  # the snapshot at 3
            await writer.gcounter_increment(crdt_id)
            await _wait_for(lambda: len(got) == 2, task)
            if how == "kill":
                await asyncio.to_thread(proc.kill)
            else:
                assert await asyncio.to_thread(proc.terminate) == 0
            proc = await asyncio.to_thread(spawn_server, env, port=port)
            # Ops while the subscriber is still away are replayed from `since`.
            for _ in range(3):
                await writer.apply_retrying(crdt_id, {"op": "increment"})
            await _wait_for(lambda: bool(got) and got[-1]["seq"] == 7, task)
            await writer.gcounter_increment(crdt_id)
            await _wait_for(lambda: got[-1]["seq"] == 8, task)
        finally:
            await stream.aclose()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        assert got[0]["kind"] == "snapshot" and got[0]["seq"] == 3
        assert [(d["kind"], d["seq"]) for d in got[1:]] == [("op", seq) for seq in range(4, 9)]
        assert len({d["epoch"] for d in got}) == 1
        assert stream.connects >= 2
        view = await writer.read(crdt_id)
        assert view is not None and view["value"] == 8


# -- limits -------------------------------------------------------------------


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_a_message_over_the_bound_ends_the_stream(client: AsyncClient, via: str) -> None:
    await client.orset_add("or:big", "x" * 4000)
    stream = open_stream(client, via, "or:big", **{_size_option(via): 2000})
    with pytest.raises(MessageTooLargeError):
        await take(stream, 1)
    assert stream.connects == 1  # no reconnect loop fetching it again
    with pytest.raises(StopAsyncIteration):
        await anext(stream)
    async with open_stream(client, via, "or:big", **{_size_option(via): 8000}) as roomy:
        (snapshot,) = await take(roomy, 1)
        assert snapshot["seq"] == 1


def _size_option(via: str) -> str:
    return "max_message_bytes" if via == "ws" else "max_event_bytes"


async def test_silent_sse_counts_as_dead_and_resumes(client: AsyncClient) -> None:
    await client.gcounter_increment("gc:quiet")
    async with client.events("gc:quiet", read_timeout_s=0.1, backoff_max_s=0.05) as stream:
        await take(stream, 1)
        collected: list[dict[str, Any]] = []
        task = asyncio.create_task(_collect(stream, collected))
        await _wait_for(lambda: stream.connects >= 3, task)  # the server pings only every 15 s
        await client.gcounter_increment("gc:quiet")
        await _wait_for(lambda: bool(collected), task)
        await asyncio.sleep(0.3)  # later reconnects bring no repeats
        task.cancel()
        assert [(d["kind"], d["seq"]) for d in collected] == [("op", 2)]


async def test_sse_pings_keep_a_quiet_stream_alive(make_server: Callable[..., Any]) -> None:
    server = await make_server(sse_ping_s=0.05)
    async with (
        AsyncClient(server.url, make_token(2), NS) as client,
        client.events("gc:ping", read_timeout_s=0.5) as stream,
    ):
        await take(stream, 1)
        collected: list[dict[str, Any]] = []
        task = asyncio.create_task(_collect(stream, collected))
        await asyncio.sleep(1.0)
        await client.gcounter_increment("gc:ping")
        await _wait_for(lambda: bool(collected), task)
        task.cancel()
        assert stream.connects == 1


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_a_read_timing_out_leaves_the_stream_usable(client: AsyncClient, via: str) -> None:
    async with open_stream(client, via, "gc:patient") as stream:
        await take(stream, 1)
        for _ in range(3):
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(anext(stream), 0.05)
        await client.gcounter_increment("gc:patient")
        (delta,) = await take(stream, 1)
        assert (delta["kind"], delta["seq"]) == ("op", 1)
