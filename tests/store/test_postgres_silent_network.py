"""A node whose PostgreSQL goes silent (a network partition: nothing
answers, nothing is closed) answers its writes 503 within the commit timeout
and takes writes again once the network is back. A batch that waited for
another node's row locks and timed out retried on a fresh connection after
a check of the pool's idle connections, and that check waits for each one's
answer without a bound: the batch, and every request in it, waited for as
long as the network was silent (no answer at all, where COMMIT_TIMEOUT_S
promises a 503). And a timeout cancelled the statement, which psycopg answers
by sending a cancel request and waiting for the results, 5 s each: an idle
node's probe said the server was away 10 s late. In-process nodes on the suite's PostgreSQL, one through a
relay that goes silent."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from syncd.cluster.replicator import PROBE_INTERVAL_S, PROBE_TIMEOUT_S
from syncd.errors import ApiError
from tests.store.pgnodes import NS, StartNode, eventually, load, op, settled
from tests.store.silent_network import SilentRelay

pytestmark = pytest.mark.timeout(60)

COMMIT_TIMEOUT_S = 1.0
ANSWER_WITHIN_S = COMMIT_TIMEOUT_S + 1.5
NOT_READY_WITHIN_S = PROBE_INTERVAL_S + PROBE_TIMEOUT_S + 1.5


@pytest.fixture
async def relay(pg_url: str) -> AsyncIterator[SilentRelay]:
    relay = await SilentRelay(pg_url).start()
    yield relay
    await relay.close()


async def test_a_write_waiting_for_locks_is_answered_503_while_the_network_is_silent(
    start_node: StartNode, relay: SilentRelay
) -> None:
    a = await start_node("a", url=relay.url, commit_timeout_s=COMMIT_TIMEOUT_S)
    b = await start_node("b")
    await settled(a)
    await settled(b)
    # Idle pooled connections on a, and a CRDT another node just wrote: a's
    # next batch on it waits for the row lock (the careful path).
    await asyncio.gather(*(a.store.list_ids(NS, "", None, 10) for _ in range(4)))
    await op(a, "gc:c", {"op": "increment", "amount": 1})
    await load(b, "gc:c")
    await op(b, "gc:c", {"op": "increment", "amount": 1})
    await eventually(lambda: (a.engine.read(NS, "gc:c") or {}).get("value") == 2)
    assert a.cluster is not None and a.cluster.contended((NS, "gc:c"))
    relay.silence()
    started = time.monotonic()
    with pytest.raises(ApiError) as refused:
        await asyncio.wait_for(
            op(a, "gc:c", {"op": "increment", "amount": 1, "op_id": "w1"}), 10 * ANSWER_WITHIN_S
        )
    assert refused.value.status == 503
    assert time.monotonic() - started < ANSWER_WITHIN_S
    relay.restore()
    # Back: the retry with the same op_id is taken (once), on a and on b.
    deadline = time.monotonic() + 15
    while True:
        try:
            result = await op(a, "gc:c", {"op": "increment", "amount": 1, "op_id": "w1"})
            break
        except ApiError as exc:
            assert exc.status == 503 and time.monotonic() < deadline
            await asyncio.sleep(0.1)
    assert result.seq == 3
    await eventually(lambda: (b.engine.read(NS, "gc:c") or {}).get("value") == 3)


async def test_an_idle_node_is_not_ready_within_a_probe_when_the_network_goes_silent(
    start_node: StartNode, relay: SilentRelay
) -> None:
    a = await start_node("a", url=relay.url)
    await settled(a)
    assert a.store.ready
    relay.silence()
    started = time.monotonic()
    while a.store.ready:
        assert time.monotonic() - started < 4 * NOT_READY_WITHIN_S, "still ready"
        await asyncio.sleep(0.05)
    # The probe's timeout, not psycopg's 10 s of cancelling on top of it.
    assert time.monotonic() - started < NOT_READY_WITHIN_S
    relay.restore()
    await eventually(lambda: a.store.ready, timeout=15)
    await op(a, "gc:c", {"op": "increment", "amount": 1})
