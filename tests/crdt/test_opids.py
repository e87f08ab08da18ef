"""The op_id memory: count and time bounds, compactness, snapshots."""

from __future__ import annotations

import sys
import tracemalloc

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from syncd.crdt.opids import BUCKET_SPAN_MS, OpIdMemory, op_id_hash
from tests.crdt.crdt_testlib import PROPERTY


def test_the_window_holds_regardless_of_age() -> None:
    memory = OpIdMemory()
    for i in range(5):
        memory.remember(f"a{i}", i + 1, {}, ts=0, window=3, ttl_ms=10)
    memory.remember("b", 6, {}, ts=1_000_000, window=3, ttl_ms=10)
    assert list(memory) == ["a3", "a4", "b"]
    assert memory.get("a3") == (4, {})
    assert memory.get("a0") is None  # old and out of the window


def test_ids_younger_than_the_ttl_stay_in_sealed_buckets() -> None:
    memory = OpIdMemory()
    ttl = 10 * BUCKET_SPAN_MS
    for i in range(20_000):
        memory.remember(f"op-{i}", i + 1, {"ids": [i]} if i % 1000 == 0 else {}, i, 10, ttl)
    assert len(memory) == 20_000
    assert memory.get("op-0") == (1, {"ids": [0]})
    assert memory.get("op-19995") == (19996, {})
    assert memory.get("op-12345") == (12346, {})
    assert memory.get("never") is None
    # Past the TTL whole buckets go.
    memory.remember("late", 0, {}, 20_000 + ttl + BUCKET_SPAN_MS, 10, ttl)
    assert memory.get("op-0") is None
    assert len(memory) <= 11


def test_export_and_load_round_trip() -> None:
    memory = OpIdMemory()
    for i in range(500):
        memory.remember(f"o{i}", i + 1, {"x": 1} if i == 7 else {}, 1000 + i, 50, 60_000)
    recent, aged = msgpack.unpackb(msgpack.packb(memory.export()))
    loaded = OpIdMemory.load(recent, aged, now_ms=2000, window=50, ttl_ms=60_000)
    for i in range(500):
        assert loaded.get(f"o{i}") == memory.get(f"o{i}")
    # An older format ([op_id, seq, extra], no stamp) keeps the window only.
    old = OpIdMemory.load(
        [["p", 1, {}], ["q", 2, {}], ["r", 3, {}]], None, now_ms=1_000_000, window=2, ttl_ms=60_000
    )
    assert list(old) == ["q", "r"] and old.get("p") is None


def test_the_hash_is_stable_and_64_bit() -> None:
    assert op_id_hash("abc") == op_id_hash("abc") != op_id_hash("abd")
    assert -(2**63) <= op_id_hash("abc") < 2**63


def test_an_aged_id_costs_about_16_bytes() -> None:
    ttl = 120_000
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    memory = OpIdMemory()
    ids = 100_000
    for i in range(ids):
        memory.remember(f"{i:032x}", i + 1, {}, i, 1024, ttl)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    per_id = used / ids
    print(f"bytes per remembered op_id: {per_id:.1f}", file=sys.stderr)
    # Sealed buckets take 16 bytes an id; the open bucket and the window more.
    assert per_id < 60


@PROPERTY
@given(data=st.data())
def test_an_id_is_remembered_as_the_docs_promise_and_forgotten_within_a_bucket_after(
    data: st.DataObject,
) -> None:
    """docs/data-model.md#op-ids, exactly: an op_id is remembered while it is
    among the last ``window`` ids or younger than the TTL (by the stamps),
    through exports and loads; and, stamps in order, one out of the window
    is forgotten by the first op stamped ``ttl + BUCKET_SPAN_MS`` after it
    (a bucket is dropped whole once its newest id is older than the TTL).
    Gaps around the bucket span and the TTL put ids on both sides of them."""
    window = data.draw(st.sampled_from([0, 1, 3, 40]), label="window")
    ttl = data.draw(st.sampled_from([0, 1000, 4000, BUCKET_SPAN_MS, 7000, 20_000]), label="ttl")
    gaps = st.sampled_from([0, 1, 999, 1000, 1001, BUCKET_SPAN_MS - 1, BUCKET_SPAN_MS, 6999, 7000])
    memory = OpIdMemory()
    held: list[tuple[str, int, int]] = []
    now = data.draw(st.integers(0, 10**9), label="start")
    for k in range(data.draw(st.integers(1, 300), label="ops")):
        now += data.draw(gaps)
        memory.remember(f"id{k}", k + 1, {}, now, window, ttl)
        held.append((f"id{k}", k + 1, now))
        if data.draw(st.integers(0, 19)) == 0:
            recent, aged = msgpack.unpackb(msgpack.packb(memory.export()))
            memory = OpIdMemory.load(recent, aged, now_ms=now, window=window, ttl_ms=ttl)
        for i, (op_id, seq, ts) in enumerate(held):
            if i >= len(held) - window or now - ts < ttl:
                assert memory.get(op_id) == (seq, {}), (op_id, now - ts)
            elif now - ts >= ttl + BUCKET_SPAN_MS:
                assert memory.get(op_id) is None, (op_id, now - ts)
