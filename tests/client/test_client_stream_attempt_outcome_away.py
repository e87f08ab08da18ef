"""A connection attempt's outcome is taken when the attempt ends, not at
whichever read comes next.

Since f2572cd an attempt runs in a task of the stream's own, so a read
cancelled by its own timeout leaves it running. Its outcome waited for the
next read, however much later, and was taken as if it had just happened: a
refusal worth retrying (a 429 with ``Retry-After``) made that read wait the
whole backoff, or the whole ``Retry-After``, again, after it had passed
while the reader was away. The wait now counts from the refusal.

And a refusal that comes after :meth:`aclose` (another task closing the
stream while its reader waits for the attempt) is nobody's: the waiting
read ends the iteration. It raised the refusal of a stream its owner had
already closed (a replica's ``close()`` logged it as the replica failing).

The real server behind a proxy that holds each new connection
100 ms (longer than the reader's read timeout), and a token
limited to one request a second, so the stream's first request is refused
429 ``rate_limited`` with ``Retry-After: 1``."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from syncd.auth.issue import issue_token
from syncd.auth.tokens import SigningKey
from syncd.client import AsyncClient, ServiceError
from syncd.client.stream import EventStream, Subscription
from tests.client.conftest import HOUR_MS, NS, limited_token, now_ms
from tests.client.test_client_stream_slow_connect_cancelled_reader import slow_proxy
from tests.conftest import RunningServer

READ_TIMEOUT_S = 0.02
"""A fifth of the proxy's hold: the first read is cancelled in the attempt."""

AWAY_S = 2.5
"""The reader's time away after its read timed out: past the refusal's
``Retry-After`` (1 s) and the first backoff (at most 50 ms) however slowly
the refusal comes, so nothing is left to wait when it reads again."""

WAIT_S = 20.0
"""Bound on the snapshot after the reader is back (generous: a loaded machine)."""

VIAS = ["ws", "sse"]


def _open(client: AsyncClient, via: str, crdt_id: str, sleep: object) -> Subscription | EventStream:
    if via == "ws":
        return client.subscribe([crdt_id], sleep=sleep)
    return client.events(crdt_id, sleep=sleep)


@pytest.mark.parametrize("via", VIAS)
async def test_a_refusal_met_while_the_reader_was_away_is_not_waited_again(
    server: RunningServer, via: str
) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(seconds)

    crdt_id = f"gc:away-{via}"
    token = limited_token()
    async with (
        AsyncClient(server.url, token, NS) as writer,
        slow_proxy(server.port) as proxy,
        AsyncClient(f"http://127.0.0.1:{proxy.port}", token, NS) as client,
    ):
        # The token's one request of this second; not through the proxy,
        # whose connection the SSE request would take from the pool unheld.
        await writer.gcounter_increment(crdt_id)
        async with _open(client, via, crdt_id, sleep) as stream:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(anext(stream), READ_TIMEOUT_S)
            await asyncio.sleep(AWAY_S)
            attempt = stream._attempt
            assert attempt is not None and attempt.done(), "the refusal came while away"
            async with asyncio.timeout(WAIT_S):
                snapshot = await anext(stream)
    assert snapshot["kind"] == "snapshot" and snapshot["id"] == crdt_id
    assert stream.connects == 1
    # Before: [~1.0], the Retry-After waited in full from the read after it passed.
    assert waits == [], waits


@pytest.mark.parametrize("via", VIAS)
async def test_a_refusal_after_aclose_ends_the_waiting_read(
    server: RunningServer, via: str
) -> None:
    """The attempt is refused 401 (a token signed with another key: the
    client cannot tell, the server can). A task awaiting the attempt task
    itself is woken in the turn the attempt ends, before the reader (woken
    through its shield, a turn later), and closes the stream there."""
    token = issue_token(
        SigningKey.generate(),
        namespace=NS,
        client_id=5,
        ttl_ms=HOUR_MS,
        permissions={"read": ["*"], "write": ["*"]},
        now_ms=now_ms(),
    )
    async with (
        slow_proxy(server.port) as proxy,
        AsyncClient(f"http://127.0.0.1:{proxy.port}", token, NS) as client,
    ):
        stream = _open(client, via, f"gc:closed-{via}", asyncio.sleep)
        reader = asyncio.ensure_future(anext(stream))
        async with asyncio.timeout(WAIT_S):
            while stream._attempt is None:
                await asyncio.sleep(0)
            attempt = stream._attempt
            with contextlib.suppress(Exception):
                await attempt  # woken in the turn it ends: the reader is not yet
            assert isinstance(attempt.exception(), ServiceError)
            await stream.aclose()
            with pytest.raises(StopAsyncIteration):
                await reader
