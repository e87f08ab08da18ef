"""The hot-path counters: exposed at scrape time with prometheus_client's names,
labels and buckets, and right after real ops over WebSocket and HTTP."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import msgpack
import pytest
from prometheus_client.parser import text_string_to_metric_families

from syncd.errors import ApiError
from syncd.ids import CRDT_ID_RE, check_crdt_id
from syncd.metrics import (
    DEFAULT_MAX_CRDT_SERIES,
    FOLDED_EXACT,
    MAX_NAMESPACE_SERIES,
    MERGE_BUCKETS,
    OTHER_NAMESPACES,
    OVERFLOW_CRDT_ID,
    Metrics,
    UsageCollector,
)
from syncd.store.base import StoreStats
from tests.conftest import RunningServer
from tests.http.support import issue, op
from tests.ws.support import NS, RawWs, client_frame


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, keyed by name and sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_values_types_and_buckets_are_prometheus_clients() -> None:
    m = Metrics()
    histogram = m.hot.merge_histogram("a")
    # On a bound counts in that bucket (le), just above it in the next.
    histogram.observe(MERGE_BUCKETS[0])
    histogram.observe(MERGE_BUCKETS[1] * 1.01)
    histogram.observe(1.0)
    m.hot.count_op("a", "gc:x", "increment")
    m.hot.count_op("a", "gc:x", "increment")
    m.hot.count_op("a", "lw:y", "set")
    m.wal_entries_total.inc(3)
    m.wal_entries_total.inc()
    m.http_response(200)
    m.http_response(200)
    m.http_response(404)
    text = m.render().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["service_ops"].type == "counter"
    assert families["service_wal_entries"].type == "counter"
    assert families["service_http_requests"].type == "counter"
    assert families["service_merge_duration_seconds"].type == "histogram"
    got = samples(text)
    ops = "service_ops_total"
    assert got[(ops, (("crdt_id", "gc:x"), ("ns", "a"), ("op_type", "increment")))] == 2
    assert got[(ops, (("crdt_id", "lw:y"), ("ns", "a"), ("op_type", "set")))] == 1
    assert got[("service_wal_entries_total", ())] == 4
    assert got[("service_http_requests_total", (("status", "200"),))] == 2
    assert got[("service_http_requests_total", (("status", "404"),))] == 1
    bucket = "service_merge_duration_seconds_bucket"
    assert got[(bucket, (("le", "1e-05"), ("ns", "a")))] == 1
    assert got[(bucket, (("le", "2.5e-05"), ("ns", "a")))] == 1
    assert got[(bucket, (("le", "5e-05"), ("ns", "a")))] == 2
    assert got[(bucket, (("le", "0.1"), ("ns", "a")))] == 2
    assert got[(bucket, (("le", "+Inf"), ("ns", "a")))] == 3
    assert got[("service_merge_duration_seconds_count", (("ns", "a"),))] == 3
    expected_sum = MERGE_BUCKETS[0] + MERGE_BUCKETS[1] * 1.01 + 1.0
    assert abs(got[("service_merge_duration_seconds_sum", (("ns", "a"),))] - expected_sum) < 1e-12
    # The same series the prometheus_client objects gave, _created included.
    assert (
        "service_ops_created",
        (("crdt_id", "gc:x"), ("ns", "a"), ("op_type", "increment")),
    ) in got
    assert ("service_merge_duration_seconds_created", (("ns", "a"),)) in got


def test_counters_only_go_up() -> None:
    m = Metrics()
    try:
        m.wal_entries_total.inc(-1)
    except ValueError:
        pass
    else:
        raise AssertionError("a negative increment was taken")
    assert m.wal_entries_total.value == 0


async def test_values_after_real_ops(make_server: Any) -> None:
    server: RunningServer = await make_server(fsync="batch")
    # Over WebSocket, in one read (one run): 5 increments, one refused op, one
    # repeat of an op_id (answered, not applied again).
    raw = await RawWs.connect(server)
    frames = b""
    bodies: list[Any] = [{"op": "increment"}] * 4 + [
        {"op": "nope"},
        {"op": "increment", "op_id": "k"},
        {"op": "increment", "op_id": "k"},
    ]
    for ref, body in enumerate(bodies):
        message = {"kind": "op", "id": "gc:w", "op": body, "ref": ref}
        frames += client_frame(0x2, msgpack.packb(message))
    raw.send(frames)
    kinds = [msgpack.unpackb((await raw.frame())[1])["kind"] for _ in bodies]
    assert kinds == ["ack"] * 4 + ["error", "ack", "ack"]
    raw.writer.close()
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client, NS)
        for _ in range(3):
            assert (await op(client, h, "lw:h", {"op": "set", "value": 1}, NS)).status_code == 200
        # A batch of two ops: two op records, one merge.
        r = await op(client, h, "gc:w", [{"op": "increment"}, {"op": "increment"}], NS)
        assert r.status_code == 200
        text = (await client.get("/metrics")).text
    got = samples(text)
    ns = ("ns", NS)
    assert got[("service_ops_total", (("crdt_id", "gc:w"), ns, ("op_type", "increment")))] == 7
    assert got[("service_ops_total", (("crdt_id", "lw:h"), ns, ("op_type", "set")))] == 3
    assert got[("service_wal_entries_total", ())] == 10
    # Every plan that reached the engine (the repeat too) is one merge; the
    # refused op is not (planning rejects it).
    assert got[("service_merge_duration_seconds_count", (ns,))] == 10
    assert got[("service_merge_duration_seconds_bucket", (("le", "+Inf"), ns))] == 10
    assert 0 < got[("service_merge_duration_seconds_sum", (ns,))] < 1


async def test_store_counters_show_the_group_commit(make_server: Any) -> None:
    """Concurrent writers share commits: fewer commits than records, one fsync
    each, and the log's bytes, all read from the real store at scrape time."""
    server: RunningServer = await make_server(fsync="batch")
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client, NS)
        before = samples((await client.get("/metrics")).text)
        answers = await asyncio.gather(
            *(op(client, h, f"gc:s{i % 4}", {"op": "increment"}, NS) for i in range(40))
        )
        assert {r.status_code for r in answers} == {200}
        got = samples((await client.get("/metrics")).text)
    commits = got[("service_store_commits_total", ())] - before[("service_store_commits_total", ())]
    fsyncs = got[("service_store_fsyncs_total", ())] - before[("service_store_fsyncs_total", ())]
    records = got[("service_wal_entries_total", ())] - before[("service_wal_entries_total", ())]
    assert records == 40
    assert 1 <= commits <= records
    assert fsyncs == commits  # SERVICE_FSYNC=batch: one sync per group commit
    stats = server.app.store.stats  # type: ignore[attr-defined]
    assert got[("service_store_log_bytes_total", ())] == stats.bytes_written > 40 * 100
    assert got[("service_store_write_failures_total", ())] == 0
    assert ("service_store_snapshots_total", ()) in got


def test_every_store_counter_is_exported_from_the_stats() -> None:
    m = Metrics()
    m.watch_store(lambda: StoreStats(batches=3, failures=1))
    got = samples(m.render().decode())
    assert got[("service_store_commits_total", ())] == 3
    assert got[("service_store_write_failures_total", ())] == 1
    assert got[("service_store_fsyncs_total", ())] == 0


def ops_series(text: str) -> dict[tuple[str, str, str], float]:
    """``service_ops_total`` of a scrape: (ns, crdt_id, op_type) -> count."""
    return {
        (s.labels["ns"], s.labels["crdt_id"], s.labels["op_type"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "service_ops_total"
    }


def folded(text: str) -> float:
    return samples(text)[("service_ops_overflow_crdts_total", ())]


FIVE = {"gc:a": 1, "gc:b": 2, "gc:c": 3, "gc:d": 4, "gc:e": 5}
"""Five CRDTs, first seen in this order, and the ops each gets."""


def count_five(m: Metrics) -> None:
    for crdt_id, n in FIVE.items():
        for _ in range(n):
            m.hot.count_op("a", crdt_id, "increment")


def test_crdt_ids_past_the_cap_count_under_the_overflow_value() -> None:
    m = Metrics(max_crdt_series=3)
    count_five(m)
    text = m.render().decode()
    assert ops_series(text) == {
        ("a", "gc:a", "increment"): 1,
        ("a", "gc:b", "increment"): 2,
        ("a", "gc:c", "increment"): 3,
        ("a", OVERFLOW_CRDT_ID, "increment"): 4 + 5,
    }
    assert folded(text) == 2
    assert (
        "service_ops_created",
        (("crdt_id", OVERFLOW_CRDT_ID), ("ns", "a"), ("op_type", "increment")),
    ) in samples(text)
    # Ids that have a series keep it, new op types included; folded ids stay
    # folded; a new id still folds.
    m.hot.count_op("a", "gc:a", "increment")
    m.hot.count_op("a", "gc:b", "reset")
    m.hot.count_op("a", "gc:d", "increment")
    m.hot.count_op("a", "gc:e", "reset")
    m.hot.count_op("a", "gc:f", "increment")
    text = m.render().decode()
    assert ops_series(text) == {
        ("a", "gc:a", "increment"): 2,
        ("a", "gc:b", "increment"): 2,
        ("a", "gc:b", "reset"): 1,
        ("a", "gc:c", "increment"): 3,
        ("a", OVERFLOW_CRDT_ID, "increment"): 4 + 5 + 1 + 1,
        ("a", OVERFLOW_CRDT_ID, "reset"): 1,
    }
    assert folded(text) == 3


def test_the_cap_is_what_folds() -> None:
    """The same ops under a cap one higher than the ids, and the default: no overflow."""
    for cap in (len(FIVE), DEFAULT_MAX_CRDT_SERIES):
        m = Metrics(max_crdt_series=cap)
        count_five(m)
        text = m.render().decode()
        assert ops_series(text) == {("a", i, "increment"): n for i, n in FIVE.items()}
        assert folded(text) == 0
    # One under: exactly the last id folds.
    m = Metrics(max_crdt_series=len(FIVE) - 1)
    count_five(m)
    text = m.render().decode()
    assert ops_series(text)[("a", OVERFLOW_CRDT_ID, "increment")] == FIVE["gc:e"]
    assert ("a", "gc:d", "increment") in ops_series(text)
    assert folded(text) == 1


def test_a_cap_of_zero_counts_every_op_under_the_overflow_value() -> None:
    m = Metrics(max_crdt_series=0)
    count_five(m)
    m.hot.count_op("b", "lw:x", "set")
    text = m.render().decode()
    # The overflow series keeps the namespace and the op type.
    assert ops_series(text) == {
        ("a", OVERFLOW_CRDT_ID, "increment"): sum(FIVE.values()),
        ("b", OVERFLOW_CRDT_ID, "set"): 1,
    }
    assert folded(text) == 6


def test_the_cap_counts_ids_across_namespaces() -> None:
    """The same id in two namespaces is two CRDTs, and two of the cap."""
    m = Metrics(max_crdt_series=2)
    for ns in ("a", "b", "c"):
        m.hot.count_op(ns, "gc:x", "increment")
    assert ops_series(m.render().decode()) == {
        ("a", "gc:x", "increment"): 1,
        ("b", "gc:x", "increment"): 1,
        ("c", OVERFLOW_CRDT_ID, "increment"): 1,
    }


def test_the_scrape_does_not_grow_with_the_crdt_count() -> None:
    m = Metrics(max_crdt_series=10)
    for i in range(20):
        m.hot.count_op("a", f"gc:{i}", "increment")
    small = len(m.render())
    for i in range(20, 5000):
        m.hot.count_op("a", f"gc:{i}", "increment")
    text = m.render().decode()
    assert len(ops_series(text)) == 11
    assert ops_series(text)[("a", OVERFLOW_CRDT_ID, "increment")] == 4990
    assert folded(text) == 4990
    # The same lines, only wider numbers (and process figures that drift).
    assert len(text) < small + 200


def test_the_overflow_value_is_never_a_crdt_id() -> None:
    assert CRDT_ID_RE.fullmatch(OVERFLOW_CRDT_ID) is None
    with pytest.raises(ApiError):
        check_crdt_id(OVERFLOW_CRDT_ID)


def test_a_negative_cap_is_refused() -> None:
    with pytest.raises(ValueError):
        Metrics(max_crdt_series=-1)


async def test_the_cap_on_a_real_server(make_server: Any) -> None:
    """SERVICE_METRICS_MAX_CRDT_SERIES=3, ops over HTTP and WebSocket on five CRDTs."""
    server: RunningServer = await make_server(metrics_max_crdt_series=3)
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client, NS)
        for crdt_id, n in list(FIVE.items())[:4]:
            r = await op(client, h, crdt_id, [{"op": "increment"}] * n, NS)
            assert r.status_code == 200
        raw = await RawWs.connect(server)
        frames = b"".join(
            client_frame(
                0x2,
                msgpack.packb({"kind": "op", "id": "gc:e", "op": {"op": "increment"}, "ref": ref}),
            )
            for ref in range(FIVE["gc:e"])
        )
        raw.send(frames)
        for _ in range(FIVE["gc:e"]):
            assert msgpack.unpackb((await raw.frame())[1])["kind"] == "ack"
        raw.writer.close()
        text = (await client.get("/metrics")).text
    assert ops_series(text) == {
        (NS, "gc:a", "increment"): 1,
        (NS, "gc:b", "increment"): 2,
        (NS, "gc:c", "increment"): 3,
        (NS, OVERFLOW_CRDT_ID, "increment"): 4 + 5,
    }
    assert folded(text) == 2


async def test_an_op_is_counted_before_its_answer_leaves(server: RunningServer) -> None:
    """The count happens in the step that answers: a scrape right after an
    answer always includes the op (it used to be counted in a later callback)."""
    from syncd.auth.authenticator import ROOT

    app = server.app
    for _ in range(3):
        await app.service.apply_ops("app", "gc:counted", {"op": "increment"}, ROOT, "http")
        # No await between the answer and the scrape: no callback could run.
        got = samples(app.metrics.render().decode())
        key = (
            "service_ops_total",
            (("crdt_id", "gc:counted"), ("ns", "app"), ("op_type", "increment")),
        )
        assert got.get(key) == _ + 1


def test_ids_past_the_cap_cost_no_memory_each() -> None:
    """The ops of 200,000 ids past the cap keep nothing per id (the cells
    stay the capped ids'), and the overflowed ids are still counted: exactly
    up to FOLDED_EXACT, within 2% past it."""
    m = Metrics(max_crdt_series=10)
    for i in range(FOLDED_EXACT):
        m.hot.count_op("a", f"gc:{i}", "increment")
    assert folded(m.render().decode()) == FOLDED_EXACT - 10
    for i in range(FOLDED_EXACT, 200_000):
        m.hot.count_op("a", f"gc:{i}", "increment")
        m.hot.count_op("a", f"gc:{i}", "increment")  # the same id again
    ops = m.hot.ops
    assert len(ops.cells) == 10 and len(ops.ids) == 10
    estimate = folded(m.render().decode())
    assert abs(estimate - (200_000 - 10)) < 0.02 * 200_000
    assert ops_series(m.render().decode())[("a", OVERFLOW_CRDT_ID, "increment")] == (
        FOLDED_EXACT - 10 + 2 * (200_000 - FOLDED_EXACT)
    )


async def test_namespaces_past_the_series_cap_share_ns_other(make_server: Any) -> None:
    """One op in each of MAX_NAMESPACE_SERIES + 5 namespaces, with no per-CRDT
    series (every op counts under crdt_id="#other"): the merge histograms and
    the overflow op series stop at the cap and the rest count under
    ns="#other", as the usage gauges do."""
    from syncd.auth.authenticator import ROOT

    server: RunningServer = await make_server(metrics_max_crdt_series=0)
    app = server.app
    extra = 5
    for i in range(MAX_NAMESPACE_SERIES + extra):
        await app.service.apply_ops(f"n{i}", "gc:x", {"op": "increment"}, ROOT, "http")
    text = app.metrics.render().decode()
    merges = {
        labels[0][1]: value
        for (name, labels), value in samples(text).items()
        if name == "service_merge_duration_seconds_count"
    }
    overflow = {ns: value for (ns, _, _), value in ops_series(text).items()}
    for series in (merges, overflow):
        assert len(series) == MAX_NAMESPACE_SERIES + 1
        assert series["n0"] == series[f"n{MAX_NAMESPACE_SERIES - 1}"] == 1
        assert series[OTHER_NAMESPACES] == extra
        assert sum(series.values()) == MAX_NAMESPACE_SERIES + extra


class _Usage:
    __slots__ = ("bytes", "crdts")

    def __init__(self, crdts: int, size: int) -> None:
        self.crdts = crdts
        self.bytes = size


def test_the_usage_gauges_show_the_largest_namespaces_and_sum_the_rest() -> None:
    usages = {f"ns{i}": _Usage(i % 7 + 1, (i * 7919) % 100_003) for i in range(5000)}
    got = {
        (s.name, s.labels.get("ns", "")): s.value
        for family in UsageCollector(lambda: usages, 1000).collect()
        for s in family.samples
    }
    largest = sorted(usages.items(), key=lambda kv: -kv[1].bytes)[:1000]
    shown = {ns for ns, _ in largest}
    for ns, usage in largest:
        assert got[("service_namespace_bytes", ns)] == usage.bytes
        assert got[("service_namespace_crdts", ns)] == usage.crdts
    rest = [u for ns, u in usages.items() if ns not in shown]
    assert got[("service_namespace_bytes", "#other")] == sum(u.bytes for u in rest)
    assert got[("service_namespace_crdts", "#other")] == sum(u.crdts for u in rest)
    assert got[("service_namespaces", "")] == len(usages)
    assert len(got) == 2 * 1001 + 1


def test_a_scrape_with_many_namespaces_costs_about_one_pass_over_them() -> None:
    """The usage gauges sorted every namespace at every scrape, then summed
    the rest in that order, all in the event loop: with 300,000 namespaces
    0.6 s per scrape (4 s with a million), some sixty passes over
    them. The largest 1000 are picked in one pass now."""
    usages = {
        f"tenant-{i}": _Usage(1 + i % 3, (i * 2654435761) % 1_000_003) for i in range(300_000)
    }
    collector = UsageCollector(lambda: usages, 1000)

    def best(run: Callable[[], object]) -> float:
        # CPU time, the least of five: wall time on a loaded machine took a
        # 9 ms pass for 25 times a scrape that costs 4 (3-5 quiet).
        times = []
        for _ in range(5):
            started = time.process_time()
            run()
            times.append(time.process_time() - started)
        return min(times)

    one_pass = best(lambda: sum(u.bytes + u.crdts for u in usages.values()))
    scrape = best(lambda: list(collector.collect()))
    assert scrape < 20 * one_pass, (one_pass, scrape)  # before: some 60 times
