from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest

from syncd.metrics import Metrics
from syncd.webhooks import client
from syncd.webhooks.dispatcher import QUEUE_SIZE, WEBHOOK_WORKERS, WebhookDispatcher
from tests.webhooks.webhook_receiver import Certs, Receiver, sample

MakeReceiver = Callable[..., Awaitable[Receiver]]
FAST = (0.01, 0.01, 0.01)  # for tests that are not about the delays
TIMER_EARLY_S = 0.002
"""How early a loop timer may fire by the clock that stamps arrivals: asyncio
runs a callback due within its clock resolution, and uvloop's timers count
whole milliseconds (a 200 ms retry was seen arriving 199.99999 ms after the
attempt it follows)."""


def event(i: int = 1, **over: Any) -> dict[str, Any]:
    e: dict[str, Any] = {
        "ns": "acme",
        "crdt_id": "gc:visits",
        "source": "http",
        "seq": i,
        "op_type": "increment",
        "client_id": 42,
    }
    e.update(over)
    return e


@pytest.fixture
async def dispatchers() -> AsyncIterator[list[WebhookDispatcher]]:
    """Dispatchers to close after the test, whatever happened."""
    made: list[WebhookDispatcher] = []
    yield made
    for d in made:
        await d.close(drain_timeout=0)


def deliveries(metrics: Metrics, result: str) -> float:
    return sample(metrics, "service_webhook_deliveries_total", result=result)


def dropped(metrics: Metrics) -> float:
    return sample(metrics, "service_webhook_dropped_total")


def depth(metrics: Metrics) -> float:
    return sample(metrics, "service_webhook_queue_depth")


async def wait_until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.005)


# --- payload and signature ----------------------------------------------------


async def test_payload_fields_types_and_signature(
    make_receiver: MakeReceiver, metrics: Metrics, dispatchers: list[WebhookDispatcher]
) -> None:
    secret = "s3cr3t-\u00e9"
    r = await make_receiver(secret=secret)
    d = WebhookDispatcher(r.url, secret, metrics=metrics)
    dispatchers.append(d)
    d.start()
    before = time.time_ns() // 1_000_000
    assert d.enqueue(event(7, source="ws", crdt_id="or:cart-1", op_type="add"))
    await r.wait_for(1)
    after = time.time_ns() // 1_000_000
    got = r.requests[0]
    assert got.signature_ok is True
    assert got.header("content-type") == "application/json"
    # The receiver's own HMAC over the exact raw body, lowercase hex.
    expected = hmac.new(secret.encode(), got.body, hashlib.sha256).hexdigest()
    assert got.header("x-service-signature") == expected
    payload = got.json()
    assert set(payload) == {
        "ns",
        "crdt_id",
        "source",
        "timestamp_ms",
        "seq",
        "op_type",
        "client_id",
        "event_id",
    }
    assert payload["ns"] == "acme"
    assert payload["crdt_id"] == "or:cart-1"
    assert payload["source"] == "ws"
    assert payload["seq"] == 7
    assert payload["op_type"] == "add"
    assert payload["client_id"] == 42
    assert isinstance(payload["timestamp_ms"], int)
    assert before <= payload["timestamp_ms"] <= after
    assert isinstance(payload["event_id"], str) and payload["event_id"]
    await wait_until(lambda: deliveries(metrics, "ok") == 1)
    assert deliveries(metrics, "retry") == deliveries(metrics, "failed") == dropped(metrics) == 0


async def test_origin_is_sent_only_when_given(
    make_receiver: MakeReceiver, dispatchers: list[WebhookDispatcher]
) -> None:
    r = await make_receiver()
    d = WebhookDispatcher(r.url, None, metrics=None, workers=1)
    dispatchers.append(d)
    d.start()
    assert d.enqueue(event(1, origin="agent:summarize-42"))
    assert d.enqueue(event(2, origin=None))
    assert d.enqueue(event(3))
    await r.wait_for(3)
    payloads = {p["seq"]: p for p in (req.json() for req in r.requests)}
    assert payloads[1]["origin"] == "agent:summarize-42"
    assert "origin" not in payloads[2] and "origin" not in payloads[3]


async def test_no_signature_header_without_a_secret(
    make_receiver: MakeReceiver, dispatchers: list[WebhookDispatcher]
) -> None:
    r = await make_receiver()
    for secret in (None, ""):
        d = WebhookDispatcher(r.url, secret, metrics=None)
        dispatchers.append(d)
        d.start()
        assert d.enqueue(event())
    await r.wait_for(2)
    for got in r.requests:
        assert got.header("x-service-signature") is None
        assert got.json()["crdt_id"] == "gc:visits"


async def test_a_wrong_secret_is_refused_by_the_receiver_and_retried(
    make_receiver: MakeReceiver, metrics: Metrics, dispatchers: list[WebhookDispatcher]
) -> None:
    r = await make_receiver(secret="right")
    d = WebhookDispatcher(r.url, "wrong", metrics=metrics, retry_delays=FAST)
    dispatchers.append(d)
    d.start()
    d.enqueue(event())
    await wait_until(lambda: dropped(metrics) == 1)
    assert [g.signature_ok for g in r.requests] == [False] * 4


async def test_given_timestamp_and_event_id_are_kept_and_ids_are_unique(
    make_receiver: MakeReceiver, dispatchers: list[WebhookDispatcher]
) -> None:
    r = await make_receiver()
    d = WebhookDispatcher(r.url, None, metrics=None)
    dispatchers.append(d)
    d.start()
    assert d.enqueue(event(1, timestamp_ms=1234, event_id="mine-1"))
    for i in range(2, 201):
        assert d.enqueue(event(i))
    await r.wait_for(200)
    payloads = {p["seq"]: p for p in (g.json() for g in r.requests)}
    assert payloads[1]["timestamp_ms"] == 1234
    assert payloads[1]["event_id"] == "mine-1"
    assert len({p["event_id"] for p in payloads.values()}) == 200
    # A second dispatcher (another node or a restart) never reuses the ids.
    d2 = WebhookDispatcher(r.url, None, metrics=None)
    dispatchers.append(d2)
    d2.start()
    d2.enqueue(event(500))
    await r.wait_for(201)
    assert r.requests[-1].json()["event_id"] not in {p["event_id"] for p in payloads.values()}


def test_enqueue_refuses_bad_events_without_raising() -> None:
    d = WebhookDispatcher("http://127.0.0.1:9/", None, metrics=None)
    assert d.enqueue({"ns": "a"}) is False  # fields missing
    assert d.enqueue(event(seq=float("nan"))) is False  # not JSON
    assert d.enqueue(event(client_id=object())) is False
    assert d.enqueue(None) is False  # type: ignore[arg-type]
    assert d.queue_depth == 0


def test_constructor_validates_the_url() -> None:
    with pytest.raises(ValueError, match="http:// or https://"):
        WebhookDispatcher("ws://example.com/", None, metrics=None)


# --- retries -----------------------------------------------------------------


async def test_two_failures_then_success_retry_after_200_and_400_ms(
    make_receiver: MakeReceiver,
    metrics: Metrics,
    dispatchers: list[WebhookDispatcher],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="syncd.webhooks")
    r = await make_receiver(fail_first=2)
    d = WebhookDispatcher(r.url, "k", metrics=metrics)  # the seed's delays
    dispatchers.append(d)
    d.start()
    d.enqueue(event())
    await r.wait_for(3)
    await wait_until(lambda: deliveries(metrics, "ok") == 1)
    await asyncio.sleep(0.3)  # no fourth attempt follows a success
    assert len(r.requests) == 3
    bodies = {g.body for g in r.requests}
    assert len(bodies) == 1  # the same event, byte for byte
    # What the dispatcher scheduled, in order: the first delay after the first
    # failure, the second after the second. Arrival times cannot bound this
    # from above (on a busy machine the loop runs late, so a gap can outgrow
    # the next delay), but they can from below: the loop runs early by no more
    # than its timer resolution.
    scheduled = [
        int(m.group(1))
        for rec in caplog.records
        if (m := re.search(r"retrying in (\d+) ms$", rec.getMessage()))
    ]
    assert scheduled == [200, 400]
    gap1 = r.requests[1].at - r.requests[0].at
    gap2 = r.requests[2].at - r.requests[1].at
    assert gap1 >= 0.2 - TIMER_EARLY_S, gap1
    assert gap2 >= 0.4 - TIMER_EARLY_S, gap2
    assert deliveries(metrics, "retry") == 2
    assert deliveries(metrics, "failed") == 0
    assert dropped(metrics) == 0


async def test_non_2xx_everywhere_gives_4_attempts_then_a_drop(
    make_receiver: MakeReceiver, metrics: Metrics, dispatchers: list[WebhookDispatcher]
) -> None:
    r = await make_receiver(fail_first=10**6, fail_status=302)  # a redirect is not success
    d = WebhookDispatcher(r.url, None, metrics=metrics, retry_delays=FAST)
    dispatchers.append(d)
    d.start()
    d.enqueue(event())
    await wait_until(lambda: dropped(metrics) == 1)
    await asyncio.sleep(0.1)
    assert len(r.requests) == 4
    assert deliveries(metrics, "retry") == 3
    assert deliveries(metrics, "failed") == 1
    assert deliveries(metrics, "ok") == 0


async def test_dead_receiver_gives_4_attempts_then_a_drop(
    dead_url: str, metrics: Metrics, dispatchers: list[WebhookDispatcher]
) -> None:
    attempts: list[str] = []

    async def counting_post(
        url: str, body: bytes, headers: Sequence[tuple[str, str]], **kw: Any
    ) -> int:
        attempts.append(url)
        return await client.post(url, body, headers, **kw)  # the real client

    d = WebhookDispatcher(dead_url, "k", metrics=metrics, retry_delays=FAST, post=counting_post)
    dispatchers.append(d)
    d.start()
    assert d.enqueue(event())
    await wait_until(lambda: dropped(metrics) == 1)
    await asyncio.sleep(0.1)
    assert len(attempts) == 4
    assert deliveries(metrics, "retry") == 3
    assert deliveries(metrics, "failed") == 1
    assert deliveries(metrics, "ok") == 0
    assert d.queue_depth == 0 and d.in_flight == 0


async def test_a_worker_survives_anything_its_post_raises(
    make_receiver: MakeReceiver, metrics: Metrics, dispatchers: list[WebhookDispatcher]
) -> None:
    r = await make_receiver()

    async def flaky_post(
        url: str, body: bytes, headers: Sequence[tuple[str, str]], **kw: Any
    ) -> int:
        if b'"seq":1,' in body:
            raise RuntimeError("a bug somewhere")
        return await client.post(url, body, headers, **kw)

    d = WebhookDispatcher(
        r.url, None, metrics=metrics, retry_delays=FAST, workers=1, post=flaky_post
    )
    dispatchers.append(d)
    d.start()
    d.enqueue(event(1))
    d.enqueue(event(2))
    await r.wait_for(1)
    assert r.requests[0].json()["seq"] == 2
    await wait_until(lambda: deliveries(metrics, "ok") == 1)
    assert deliveries(metrics, "failed") == 1


async def test_logs_never_hold_the_secret(
    dead_url: str,
    metrics: Metrics,
    dispatchers: list[WebhookDispatcher],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="syncd.webhooks")
    secret = "very-secret-value"
    url = dead_url.replace("/hook", "/services/path-token") + "?token=query-token"
    d = WebhookDispatcher(url, secret, metrics=metrics, retry_delays=FAST)
    dispatchers.append(d)
    d.start()
    d.enqueue(event())
    await wait_until(lambda: dropped(metrics) == 1)
    text = caplog.text
    assert "dropped after 4 attempts" in text
    assert secret not in text
    assert "query-token" not in text
    assert "path-token" not in text


# --- the op path is never held up ------------------------------------------------


async def test_enqueue_stays_fast_while_deliveries_fail(
    dead_url: str, metrics: Metrics, dispatchers: list[WebhookDispatcher]
) -> None:
    d = WebhookDispatcher(dead_url, "k", metrics=metrics, retry_delays=FAST)
    dispatchers.append(d)
    d.start()
    costs: list[float] = []
    for i in range(600):
        t0 = time.perf_counter()
        d.enqueue(event(i))
        costs.append(time.perf_counter() - t0)
        if i % 50 == 0:
            await asyncio.sleep(0.01)  # let the workers fail meanwhile
    assert deliveries(metrics, "retry") > 0  # deliveries really were failing
    costs.sort()
    assert statistics.median(costs) < 100e-6, costs[len(costs) // 2]
    assert costs[int(len(costs) * 0.99)] < 2e-3, costs[-10:]
    assert sum(costs) < 0.1


async def test_stalled_receiver_fills_the_queue_then_drops(
    make_receiver: MakeReceiver,
    metrics: Metrics,
    dispatchers: list[WebhookDispatcher],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="syncd.webhooks")
    r = await make_receiver(stall=True)
    d = WebhookDispatcher(r.url, None, metrics=metrics, total_timeout=60)
    dispatchers.append(d)
    d.start()
    # First let every worker take one event and hang on the stalled receiver.
    for i in range(WEBHOOK_WORKERS):
        assert d.enqueue(event(i))
    await r.wait_for(WEBHOOK_WORKERS)
    assert d.in_flight == WEBHOOK_WORKERS and d.queue_depth == 0
    # Then the flood, all on the op path without yielding.
    t0 = time.perf_counter()
    accepted = sum(d.enqueue(event(i)) for i in range(WEBHOOK_WORKERS, 2000))
    flood_time = time.perf_counter() - t0
    assert accepted == QUEUE_SIZE
    assert d.queue_depth == QUEUE_SIZE
    assert depth(metrics) == QUEUE_SIZE
    assert dropped(metrics) == 2000 - WEBHOOK_WORKERS - QUEUE_SIZE
    assert flood_time < 1.0
    # 972 drops, one log line: the flood is rate-limited in the log too.
    drop_lines = [r for r in caplog.records if "queue of 1024 full" in r.getMessage()]
    assert len(drop_lines) == 1
    await asyncio.sleep(0.05)
    assert len(r.requests) == WEBHOOK_WORKERS  # nobody else got through
    # Shutdown gives up after its bound and counts what it could not send.
    loop = asyncio.get_running_loop()
    start = loop.time()
    await d.close(drain_timeout=0.2)
    elapsed = loop.time() - start
    assert 0.2 - 1e-3 <= elapsed < 1.0  # 1 ms: float noise of the loop clock
    assert dropped(metrics) == 2000
    assert depth(metrics) == 0
    assert deliveries(metrics, "ok") == 0
    assert d.enqueue(event()) is False  # closed: refused and counted
    assert dropped(metrics) == 2001


async def test_a_small_queue_limit_is_exact(
    make_receiver: MakeReceiver, metrics: Metrics, dispatchers: list[WebhookDispatcher]
) -> None:
    r = await make_receiver(stall=True)
    d = WebhookDispatcher(r.url, None, metrics=metrics, queue_size=3, workers=1, total_timeout=60)
    dispatchers.append(d)
    results = [d.enqueue(event(i)) for i in range(5)]  # not started: nothing in flight
    assert results == [True, True, True, False, False]
    assert dropped(metrics) == 2


# --- shutdown -------------------------------------------------------------------


async def test_close_drains_the_queue_within_the_bound(
    make_receiver: MakeReceiver, metrics: Metrics
) -> None:
    r = await make_receiver(fail_first=1)
    d = WebhookDispatcher(r.url, None, metrics=metrics, retry_delays=(0.05, 0.05, 0.05))
    d.start()
    for i in range(30):
        d.enqueue(event(i))
    loop = asyncio.get_running_loop()
    start = loop.time()
    await d.close(drain_timeout=5.0)
    assert loop.time() - start < 5.0
    # Every event arrived, the one that needed a retry included.
    assert {g.json()["seq"] for g in r.requests} == set(range(30))
    assert deliveries(metrics, "ok") == 30
    assert deliveries(metrics, "retry") == 1
    assert dropped(metrics) == 0
    assert d.enqueue(event()) is False


async def test_close_of_an_idle_or_unstarted_dispatcher_is_immediate(metrics: Metrics) -> None:
    loop = asyncio.get_running_loop()
    idle = WebhookDispatcher("http://127.0.0.1:9/", None, metrics=metrics)
    idle.start()
    start = loop.time()
    await idle.close(drain_timeout=5.0)
    await idle.close(drain_timeout=5.0)  # twice is fine
    assert loop.time() - start < 0.5
    never = WebhookDispatcher("http://127.0.0.1:9/", None, metrics=metrics)
    never.enqueue(event())
    await never.close(drain_timeout=5.0)
    assert dropped(metrics) == 1  # it was never going to be sent
    with pytest.raises(RuntimeError):
        never.start()


# --- https ------------------------------------------------------------------------


async def test_https_delivery_with_a_trusted_self_signed_cert(
    make_receiver: MakeReceiver,
    certs: Certs,
    metrics: Metrics,
    dispatchers: list[WebhookDispatcher],
) -> None:
    r = await make_receiver(secret="k", ssl_context=certs.server_context())
    d = WebhookDispatcher(
        r.url_for("localhost"), "k", metrics=metrics, ssl_context=certs.client_context()
    )
    dispatchers.append(d)
    d.start()
    d.enqueue(event(3))
    await r.wait_for(1)
    assert r.requests[0].signature_ok is True
    assert r.requests[0].json()["seq"] == 3
    await wait_until(lambda: deliveries(metrics, "ok") == 1)


async def test_https_without_trust_fails_and_is_dropped(
    make_receiver: MakeReceiver,
    certs: Certs,
    metrics: Metrics,
    dispatchers: list[WebhookDispatcher],
) -> None:
    r = await make_receiver(ssl_context=certs.server_context())
    d = WebhookDispatcher(r.url_for("localhost"), None, metrics=metrics, retry_delays=FAST)
    dispatchers.append(d)
    d.start()
    d.enqueue(event())
    await wait_until(lambda: dropped(metrics) == 1)
    assert deliveries(metrics, "failed") == 1
    assert r.requests == []
