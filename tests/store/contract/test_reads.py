"""Reading back: ``load`` and ``holds``, ``list_ids``, ``history``,
``history_window`` and ``history_base``, and ``ops_since`` (None when the
store cannot serve it)."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from syncd.crdt.types import crdt_class
from syncd.errors import ApiError, StoreUnavailable
from syncd.store.base import Store, attribution
from tests.store.contract.backends import NS, RETAIN_OPS, Harness

EVERY_TYPE: list[tuple[str, list[Any]]] = [
    ("gc:hits", [{"op": "increment", "amount": 5}, {"op": "increment", "op_id": "g1"}]),
    ("pn:score", [{"op": "increment", "amount": 7}, {"op": "decrement", "amount": 2}]),
    (
        "or:tags",
        [
            {"op": "add", "element": "x"},
            {"op": "add", "element": {"k": [1, 2]}},
            {"op": "remove", "element": "x"},
        ],
    ),
    ("lw:title", [{"op": "set", "value": {"t": "hello"}}, {"op": "set", "value": "bye"}]),
    ("pr:room", [{"op": "update", "data": {"cursor": 3}, "ttl_ms": 300000}]),
    (
        "rg:doc",
        [
            {"op": "insert", "index": 0, "text": "hello"},
            {"op": "delete", "index": 1, "count": 2},
            {"op": "insert", "index": 0, "values": [1, None]},
        ],
    ),
    (
        "tr:outline",
        [
            {"op": "add", "id": "a", "parent": "root", "data": {"n": 1}},
            {"op": "add", "id": "b", "parent": "a"},
            {"op": "move", "id": "b", "parent": "root", "pos": "0"},
        ],
    ),
    ("plain", [{"op": "increment", "type": "gcounter", "amount": 3}]),
    ("or:batch", [[{"op": "add", "element": i, "op_id": f"b{i}"} for i in range(5)]]),
]


def seqs(records: list[dict[str, Any]]) -> list[Any]:
    return [r["seq"] for r in records]


async def value_at(store: Store, crdt_id: str, epoch: str, latest: int, seq: int) -> Any:
    """The CRDT's value right after op ``seq``, rebuilt from ``history_base``."""
    checkpoint, records = await store.history_base(NS, crdt_id, epoch, latest, seq)
    assert seqs(records) == list(range(seq - len(records) + 1, seq + 1))  # ascending, up to seq
    cls = crdt_class("pncounter")
    crdt = cls.from_state(checkpoint["state"]) if checkpoint is not None else cls.new()
    for record in records:
        crdt.apply_delta(record["op"])
    return crdt.view(0)["value"]


async def test_load_gives_back_every_type_exactly_and_holds_says_it_would(
    backend: Harness,
) -> None:
    for crdt_id, bodies in EVERY_TYPE:
        for body in bodies:
            await backend.commit(crdt_id, body)
    states = {crdt_id: backend.state(crdt_id) for crdt_id, _ in EVERY_TYPE}
    await backend.restart()  # nothing in memory: every CRDT comes from load
    store = backend.store
    # A store that cannot load on demand keeps every CRDT resident: its open
    # must hand every one back (every backend here loads on demand).
    assert store.loads_on_demand or backend.traits.recovers_records
    assert await store.load(NS, "gc:unknown") is None
    exact = backend.traits.holds_checks_position
    for crdt_id, state in states.items():
        assert state is not None
        assert await backend.stored(crdt_id) == state
        epoch, seq = state["epoch"], state["seq"]
        assert store.holds(NS, crdt_id, epoch, seq)
        # A local store checks the position asked; PostgreSQL answers that
        # nothing is in flight (the engine asks only of what it holds).
        assert store.holds(NS, crdt_id, epoch, seq + 1) is not exact
        assert store.holds(NS, crdt_id, "another-life", seq) is not exact
    # op_ids come back with their CRDT: a repeat is still a repeat.
    again = await backend.commit("gc:hits", {"op": "increment", "op_id": "g1"})
    assert again.duplicate and again.seq == 2
    again = await backend.commit("or:batch", [{"op": "add", "element": 3, "op_id": "b3"}])
    assert again.duplicate and again.records == []


async def test_list_ids_pages_live_crdts_in_code_point_order(backend: Harness) -> None:
    ids = ["gc:a", "gc:a-b", "gc:a.b", "gc:ab", "gc:B", "gc:a~", "pn:z", "gc:gone"]
    for n, crdt_id in enumerate(ids, 1):
        await backend.commit(crdt_id, [{"op": "increment"}] * n)
    await backend.commit("gc:a", {"op": "increment"}, ns="m")
    await backend.delete("gc:gone")
    store = backend.store
    live = sorted(ids[:-1])  # code points: "B" < "a", "-" < "." < "b" < "~"
    assert [i for i, _, _ in await store.list_ids(NS, "", None, 100)] == live
    assert await store.list_ids(NS, "gc:a", None, 100) == [
        ("gc:a", "gcounter", 1),
        ("gc:a-b", "gcounter", 2),
        ("gc:a.b", "gcounter", 3),
        ("gc:ab", "gcounter", 4),
        ("gc:a~", "gcounter", 6),
    ]
    assert [i for i, _, _ in await store.list_ids(NS, "gc:a.", None, 100)] == ["gc:a.b"]
    assert [i for i, _, _ in await store.list_ids(NS, "gc:a", "gc:a-b", 2)] == [
        "gc:a.b",
        "gc:ab",
    ]
    assert await store.list_ids(NS, "", "pn:z", 100) == []
    assert await store.list_ids(NS, "pn:", None, 1) == [("pn:z", "pncounter", 7)]
    assert await store.list_ids("m", "", None, 100) == [("gc:a", "gcounter", 1)]
    assert await store.list_ids("nobody", "", None, 100) == []


async def test_history_pages_newest_first_and_rebuilds_every_retained_state(
    backend: Harness,
) -> None:
    values = {0: 0}
    for i in range(1, 21):
        result = await backend.commit("pn:h", {"op": "increment", "amount": i})
        values[result.seq] = values[result.seq - 1] + i
    store = backend.store
    entry = backend.engine.get(NS, "pn:h")
    assert entry is not None
    epoch = entry.epoch
    page, oldest = await store.history(NS, "pn:h", epoch, 20, None, 5)
    assert seqs(page) == [20, 19, 18, 17, 16] and oldest == 0
    assert all(r["kind"] == "op" and r["epoch"] == epoch for r in page)
    page, _ = await store.history(NS, "pn:h", epoch, 20, 16, 5)
    assert seqs(page) == [15, 14, 13, 12, 11]
    page, _ = await store.history(NS, "pn:h", epoch, 20, 3, 5)
    assert seqs(page) == [2, 1]
    for seq in range(0, 21):
        assert await value_at(store, "pn:h", epoch, 20, seq) == values[seq]


async def test_history_window_reads_on_from_a_seq_knowing_each_writer(backend: Harness) -> None:
    """``history_window``: ascending from ``since`` (at most ``most``), each
    op's writer and tag as ``attribution`` says, the records as ``history``
    gives them (decoded when read; the encoding, where a store keeps one,
    decodes to the record)."""
    for i in range(1, 13):
        body: dict[str, Any] = {"op": "increment", "amount": i}
        if i % 3 == 0:
            body["origin"] = "agent:x"
        await backend.commit("pn:w", body, client_id=7 if i % 2 else 8)
    plan = backend.engine.plan(NS, "pn:w", {"op": "decrement", "origin": "revert"})
    plan.marks = {"reverts": {"origin": "agent:x", "since_seq": 1, "until_seq": 12}}
    await backend.store.commit(NS, "pn:w", backend.apply_for(plan, 9))
    store = backend.store
    entry = backend.engine.get(NS, "pn:w")
    assert entry is not None and entry.seq == 13
    held, oldest = await store.history_window(NS, "pn:w", entry.epoch, 13, 5, 100)
    assert list(held.seqs) == list(range(5, 14)) and oldest == 0
    page, _ = await store.history(NS, "pn:w", entry.epoch, 13, None, 100)
    by_seq = {record["seq"]: record for record in page}
    encodings = held.encodings()
    assert encodings is None or len(encodings) == len(held)
    for i, seq in enumerate(held.seqs):
        record = held.record(i)
        assert record == by_seq[seq]
        assert (held.writers[i], held.tags[i]) == attribution(record) and held.tags[i]
        assert encodings is None or msgpack.unpackb(encodings[i]) == record
    assert [held.seqs[i] for i in held.may_be_by(8, "agent:x")] == [6, 12]
    assert [held.seqs[i] for i in held.may_be_by(None, "revert")] == [13]
    assert [held.seqs[i] for i in held.may_be_reverts()] == [13]
    held, _ = await store.history_window(NS, "pn:w", entry.epoch, 13, None, 3)
    assert list(held.seqs) == [1, 2, 3]
    held, _ = await store.history_window(NS, "pn:w", entry.epoch, 13, 14, 3)
    assert len(held) == 0


async def test_history_older_than_retained_is_410_and_so_far_back_there_is_no_replay(
    backend: Harness,
) -> None:
    total = 400  # past a few checkpoints on every backend (16 KiB of ops; PostgreSQL's 100)
    for _ in range(total // 10):
        await backend.commit("pn:x", [{"op": "increment"}] * 10)
    await backend.expire_history()
    store = backend.store
    entry = backend.engine.get(NS, "pn:x")
    assert entry is not None
    epoch = entry.epoch
    _, oldest = await store.history(NS, "pn:x", epoch, total, None, 1)
    assert 0 < oldest <= total - RETAIN_OPS  # at least what retention promises stays
    with pytest.raises(ApiError) as expired:
        await store.history_base(NS, "pn:x", epoch, total, oldest - 1)
    assert not isinstance(expired.value, StoreUnavailable)
    assert (expired.value.status, expired.value.code) == (410, "history_expired")
    assert expired.value.body()["oldest"] == oldest
    for seq in (oldest, total - RETAIN_OPS, total):
        assert await value_at(store, "pn:x", epoch, total, seq) == seq
    page, _ = await store.history(NS, "pn:x", epoch, total, None, total)
    assert seqs(page)[:RETAIN_OPS] == list(range(total, total - RETAIN_OPS, -1))
    held, since = await store.history_window(NS, "pn:x", epoch, total, None, total)
    assert since == oldest and list(held.seqs) == list(range(oldest + 1, total + 1))

    assert await store.ops_since(NS, "pn:x", epoch, 0) is None  # a snapshot instead
    replay = await store.ops_since(NS, "pn:x", epoch, total - 3)
    assert replay is not None and seqs(replay) == [total - 2, total - 1, total]
    assert await store.ops_since(NS, "pn:x", "another-life", total - 3) is None
    assert await store.ops_since(NS, "pn:unknown", epoch, 0) is None
