"""The engine: type resolution, batches, op_id idempotency, seq and epochs,
delete, read, snapshots, export/import, replay and paging."""

from __future__ import annotations

import itertools
from typing import Any

import msgpack
import pytest

from syncd.crdt.engine import (
    MAX_BATCH_OPS,
    OP_ID_MAX_LEN,
    RESIZE_EVERY_OPS,
    Engine,
    GapError,
    _merge_extra,
    mask_bit,
    state_bytes,
)
from syncd.crdt.types import PREFIXES, TYPES, type_for_id
from syncd.errors import ApiError

NS = "ns1"


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def make_engine(**kw: Any) -> tuple[Engine, Clock]:
    clock = Clock()
    counter = itertools.count(1)
    engine = Engine(clock_ms=clock, epoch_factory=lambda: f"epoch{next(counter)}", **kw)
    return engine, clock


def run(engine: Engine, crdt_id: str, body: Any, client_id: int = 1) -> Any:
    return engine.apply(engine.plan(NS, crdt_id, body), client_id)


def error(fn: Any, *args: Any, **kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        fn(*args, **kwargs)
    return info.value


# -- type resolution ------------------------------------------------------


def test_every_prefix_maps_to_a_type() -> None:
    assert PREFIXES == {
        "gc:": "gcounter",
        "pn:": "pncounter",
        "or:": "orset",
        "lw:": "lwwregister",
        "pr:": "presence",
        "rg:": "rga",
        "tr:": "tree",
        "yd:": "ydoc",
    }
    assert type_for_id("gc:x") == "gcounter"
    assert type_for_id("plain") is None
    assert type_for_id("gc") is None


def test_type_comes_from_the_prefix_or_the_op() -> None:
    engine, _ = make_engine()
    assert engine.plan(NS, "gc:a", {"op": "increment"}).type_name == "gcounter"
    assert engine.plan(NS, "gc:a", {"op": "increment", "type": "gcounter"}).type_name == "gcounter"
    assert (
        engine.plan(NS, "plain", {"op": "add", "type": "orset", "element": 1}).type_name == "orset"
    )
    run(engine, "plain", {"op": "add", "type": "orset", "element": 1})
    # Once stored, the type is fixed; the op may leave it out.
    assert engine.plan(NS, "plain", {"op": "remove", "element": 1}).type_name == "orset"
    # In a batch, a later op may name the type of a new prefix-less id.
    plan = engine.plan(
        NS, "other", [{"op": "set", "value": 1}, {"op": "set", "value": 2, "type": "lwwregister"}]
    )
    assert plan.type_name == "lwwregister"


def test_type_mismatch_and_unknown_types() -> None:
    engine, _ = make_engine()
    err = error(engine.plan, NS, "gc:a", {"op": "add", "type": "orset"})
    assert (err.status, err.code) == (409, "type_mismatch")
    run(engine, "plain", {"op": "increment", "type": "gcounter"})
    err = error(engine.plan, NS, "plain", {"op": "increment", "type": "pncounter"})
    assert (err.status, err.code) == (409, "type_mismatch")
    err = error(
        engine.plan,
        NS,
        "new",
        [{"op": "set", "type": "lwwregister"}, {"op": "add", "type": "orset"}],
    )
    assert (err.status, err.code) == (409, "type_mismatch")
    assert err.message.startswith("ops[1].type:")
    for bad in ("nosuch", 5, ["gcounter"]):
        err = error(engine.plan, NS, "gc:a", {"op": "increment", "type": bad})
        assert (err.status, err.code) == (400, "unknown_type")
    err = error(engine.plan, NS, "plain-new", {"op": "increment"})
    assert (err.status, err.code) == (400, "unknown_type")


def test_body_shapes() -> None:
    engine, _ = make_engine()
    for body in ("x", 5, None, True):
        err = error(engine.plan, NS, "gc:a", body)
        assert (err.status, err.code) == (400, "bad_request")
    err = error(engine.plan, NS, "gc:a", [])
    assert err.code == "bad_request"
    err = error(engine.plan, NS, "gc:a", [{"op": "increment"}, 5])
    assert err.code == "bad_request" and err.message.startswith("ops[1]")
    err = error(engine.plan, NS, "gc:a", [{"op": "increment"}] * (MAX_BATCH_OPS + 1))
    assert err.code == "bad_request"
    result = run(engine, "gc:a", [{"op": "increment"}] * MAX_BATCH_OPS)
    assert (result.applied, result.seq) == (MAX_BATCH_OPS, MAX_BATCH_OPS)
    assert engine.read(NS, "gc:a")["value"] == MAX_BATCH_OPS  # type: ignore[index]


def test_a_server_made_body_names_its_own_bound_and_applies_whole() -> None:
    """A revert's ops (syncd/revert.py) are planned as one body past
    MAX_BATCH_OPS, so they apply as one, all or none; its bound still holds."""
    engine, _ = make_engine()
    count = MAX_BATCH_OPS * 2 + 1
    err = error(engine.plan, NS, "gc:a", [{"op": "increment"}] * (count + 1), most=count)
    assert err.code == "bad_request" and str(count) in err.message
    result = run_most(engine, "gc:a", [{"op": "increment"}] * count, count)
    assert (result.applied, result.seq, len(result.records)) == (count, count, count)
    refused = [{"op": "increment"}] * (count - 1) + [{"op": "increment", "amount": -1}]
    err = error(run_most, engine, "gc:a", refused, count)
    assert err.message.startswith(f"ops[{count - 1}]")
    assert engine.read(NS, "gc:a")["value"] == count  # type: ignore[index]


def run_most(engine: Engine, crdt_id: str, body: Any, most: int) -> Any:
    return engine.apply(engine.plan(NS, crdt_id, body, most=most), 1)


def test_op_names_and_op_ids_are_checked_in_the_plan() -> None:
    engine, _ = make_engine()
    for op in ({}, {"op": "decrement"}, {"op": 1}):
        err = error(engine.plan, NS, "gc:a", op)
        assert (err.code, err.message[:3]) == ("invalid_op", "op:")
    for op_id in (5, "", "x" * (OP_ID_MAX_LEN + 1), ["a"]):
        err = error(engine.plan, NS, "gc:a", {"op": "increment", "op_id": op_id})
        assert err.code == "invalid_op" and err.message.startswith("op_id:")
    engine.plan(NS, "gc:a", {"op": "increment", "op_id": "x" * OP_ID_MAX_LEN})
    engine.plan(NS, "gc:a", {"op": "increment", "op_id": None})
    err = error(engine.plan, NS, "gc:a", [{"op": "increment"}, {"op": "increment", "op_id": 3}])
    assert err.message.startswith("ops[1].op_id:")
    assert not engine.get(NS, "gc:a")


def test_plan_reports_names_and_mask() -> None:
    engine, _ = make_engine()
    plan = engine.plan(
        NS,
        "tr:t",
        [
            {"op": "add", "id": "a"},
            {"op": "move", "id": "a", "parent": "root"},
            {"op": "add", "id": "b"},
        ],
    )
    assert plan.op_names == ["add", "move", "add"]
    assert plan.mask == 0x03
    assert engine.plan(NS, "pr:p", {"op": "leave"}).mask == 0x01
    assert mask_bit("tree", "delete") == Engine.mask_bit("tree", "delete") == 0x08
    assert mask_bit("pncounter", "decrement") == 0x02
    assert error(mask_bit, "nosuch", "x").code == "unknown_type"
    assert error(mask_bit, "gcounter", "decrement").code == "invalid_op"
    for type_name, cls in TYPES.items():
        assert type_name == cls.TYPE


# -- applying -------------------------------------------------------------


def test_single_op_record_seq_and_epoch() -> None:
    engine, clock = make_engine()
    result = run(engine, "gc:a", {"op": "increment", "amount": 2, "op_id": "k1"}, client_id=9)
    assert result.created and result.applied == 1 and not result.duplicate
    assert result.records == [
        {
            "kind": "op",
            "ns": NS,
            "id": "gc:a",
            "type": "gcounter",
            "seq": 1,
            "epoch": "epoch1",
            "client_id": 9,
            "ts": 1_000_000,
            "op": {"op": "increment", "client_id": 9, "amount": 2, "count": 2},
            "op_id": "k1",
        }
    ]
    clock.now = 999_000  # the wall clock stepped back; record stamps do not
    result = run(engine, "gc:a", {"op": "increment"}, client_id=9)
    assert (result.seq, result.created, result.records[0]["ts"]) == (2, False, 1_000_000)
    assert result.records[0]["op_id"] is None
    assert engine.read(NS, "gc:a") == {
        "id": "gc:a",
        "type": "gcounter",
        "seq": 2,
        "epoch": "epoch1",
        "value": 3,
        "counts": {"9": 3},
    }
    assert engine.read(NS, "gc:a", full=True) == {
        "id": "gc:a",
        "type": "gcounter",
        "seq": 2,
        "epoch": "epoch1",
        "state": {"counts": {"9": 3}},
    }
    # Records are msgpack-able as they stand.
    msgpack.packb(result.records)


def test_a_refused_first_op_creates_nothing() -> None:
    engine, _ = make_engine()
    err = error(run, engine, "gc:a", {"op": "increment", "amount": 0})
    assert err.message.startswith("amount:")
    assert engine.get(NS, "gc:a") is None
    assert engine.read(NS, "gc:a") is None
    assert len(engine) == 0 and engine.resident_bytes == 0


def test_body_client_id_must_match_the_token() -> None:
    engine, _ = make_engine()
    run(engine, "gc:a", {"op": "increment", "client_id": 4}, client_id=4)
    for claimed in (5, "4", True, 4.0):
        err = error(run, engine, "gc:a", {"op": "increment", "client_id": claimed}, 4)
        assert (err.status, err.code) == (403, "forbidden")
    err = error(run, engine, "gc:a", [{"op": "increment"}, {"op": "increment", "client_id": 5}], 4)
    assert err.code == "forbidden"
    assert engine.get(NS, "gc:a").seq == 1  # type: ignore[union-attr]


def test_batches_are_all_or_none() -> None:
    engine, _ = make_engine()
    run(engine, "or:s", {"op": "add", "element": "keep"})
    before = engine.read(NS, "or:s", full=True)
    body = [{"op": "add", "element": 1}, {"op": "remove", "element": "keep"}, {"op": "add"}]
    err = error(run, engine, "or:s", body)
    assert (err.code, err.message) == ("invalid_op", "ops[2].element: required")
    assert engine.read(NS, "or:s", full=True) == before
    # A new CRDT whose batch fails is not created.
    error(run, engine, "or:new", body)
    assert engine.get(NS, "or:new") is None
    result = run(engine, "or:s", body[:2])
    assert (result.applied, result.seq, [r["seq"] for r in result.records]) == (2, 3, [2, 3])
    assert engine.read(NS, "or:s")["value"] == [1]  # type: ignore[index]
    # A tree batch that builds and then refuses a cycle leaves nothing behind.
    body = [
        {"op": "add", "id": "a"},
        {"op": "add", "id": "b", "parent": "a"},
        {"op": "move", "id": "a", "parent": "b"},
    ]
    err = error(run, engine, "tr:t", body)
    assert (err.status, err.code) == (409, "cycle")
    assert engine.get(NS, "tr:t") is None


def test_op_id_repeat_answers_with_the_first_answer() -> None:
    engine, _ = make_engine()
    first = run(engine, "gc:a", {"op": "increment", "op_id": "x"})
    run(engine, "gc:a", {"op": "increment"})
    again = run(engine, "gc:a", {"op": "increment", "op_id": "x"})
    assert (again.records, again.seq, again.applied, again.duplicate, again.created) == (
        [],
        1,
        1,  # as the first answer said
        True,
        False,
    )
    assert first.seq == 1 and first.applied == 1
    assert engine.read(NS, "gc:a")["value"] == 2  # type: ignore[index]
    # Inside a batch: a repeat of an older op and a repeat within the batch.
    result = run(
        engine,
        "gc:a",
        [
            {"op": "increment", "op_id": "y"},
            {"op": "increment", "op_id": "x"},
            {"op": "increment", "op_id": "y"},
            {"op": "increment", "op_id": "z"},
        ],
    )
    # applied counts every op of the request: two now, two by earlier requests.
    assert (result.applied, result.duplicate, result.seq) == (4, True, 4)
    assert [r["op_id"] for r in result.records] == ["y", "z"]
    assert engine.read(NS, "gc:a")["value"] == 4  # type: ignore[index]
    # A batch of nothing but repeats writes nothing and answers the highest seq.
    result = run(
        engine, "gc:a", [{"op": "increment", "op_id": "z"}, {"op": "increment", "op_id": "x"}]
    )
    assert (result.records, result.applied, result.duplicate, result.seq) == ([], 2, True, 4)
    # The same op_id on another CRDT is another op.
    assert run(engine, "gc:b", {"op": "increment", "op_id": "x"}).applied == 1


def test_op_id_window_is_bounded() -> None:
    engine, _ = make_engine(op_id_window=3, op_id_ttl_ms=0)
    for key in "abcd":
        run(engine, "gc:a", {"op": "increment", "op_id": key})
    assert list(engine.get(NS, "gc:a").op_ids) == ["b", "c", "d"]  # type: ignore[union-attr]
    assert run(engine, "gc:a", {"op": "increment", "op_id": "d"}).duplicate
    # "a" fell out of the window: it applies again.
    assert run(engine, "gc:a", {"op": "increment", "op_id": "a"}).applied == 1
    batch = run(engine, "gc:a", [{"op": "increment", "op_id": k} for k in "pqrst"])
    assert batch.applied == 5
    assert list(engine.get(NS, "gc:a").op_ids) == ["r", "s", "t"]  # type: ignore[union-attr]
    off, _ = make_engine(op_id_window=0, op_id_ttl_ms=0)
    run(off, "gc:a", {"op": "increment", "op_id": "a"})
    assert run(off, "gc:a", {"op": "increment", "op_id": "a"}).applied == 1


def test_merge_extra_concatenates_lists() -> None:
    extra: dict[str, Any] = {}
    _merge_extra(extra, {"ids": ["1@1"]})
    _merge_extra(extra, {})
    _merge_extra(extra, {"ids": ["2@1", "3@1"], "n": 1})
    assert extra == {"ids": ["1@1", "2@1", "3@1"], "n": 1}


def test_plan_then_type_change_is_a_mismatch() -> None:
    engine, _ = make_engine()
    run(engine, "plain", {"op": "increment", "type": "gcounter"})
    plan = engine.plan(NS, "plain", {"op": "increment"})
    engine.delete(NS, "plain")
    run(engine, "plain", {"op": "set", "value": 1, "type": "lwwregister"})
    assert error(engine.apply, plan, 1).code == "type_mismatch"


# -- lives, reads, snapshots ----------------------------------------------


def test_delete_then_recreate_starts_a_new_life() -> None:
    engine, _ = make_engine()
    run(engine, "gc:a", {"op": "increment", "op_id": "k"})
    run(engine, "gc:a", {"op": "increment"})
    assert engine.delete(NS, "gc:a") == {"kind": "deleted", "ns": NS, "id": "gc:a"}
    assert engine.delete(NS, "gc:a") is None
    assert engine.read(NS, "gc:a") is None
    result = run(engine, "gc:a", {"op": "increment", "op_id": "k"})
    assert (result.created, result.seq, result.applied) == (True, 1, 1)
    assert result.records[0]["epoch"] == "epoch2"
    assert engine.read(NS, "gc:a")["value"] == 1  # type: ignore[index]


def test_snapshot_delta() -> None:
    engine, _ = make_engine()
    assert engine.snapshot_delta(NS, "or:s") == {
        "kind": "snapshot",
        "ns": NS,
        "id": "or:s",
        "type": "orset",
        "seq": 0,
        "epoch": None,
        "state": None,
    }
    assert engine.snapshot_delta(NS, "plain")["type"] is None
    run(engine, "or:s", {"op": "add", "element": "x"}, client_id=2)
    assert engine.snapshot_delta(NS, "or:s") == {
        "kind": "snapshot",
        "ns": NS,
        "id": "or:s",
        "type": "orset",
        "seq": 1,
        "epoch": "epoch1",
        "state": {"elements": [["x", [[2, 1]]]], "vv": {"2": 1}, "cloud": []},
    }


def test_presence_is_read_with_the_engine_clock() -> None:
    engine, clock = make_engine()
    run(engine, "pr:room", {"op": "update", "data": {"n": 1}, "ttl_ms": 1000}, client_id=3)
    assert engine.read(NS, "pr:room")["value"] == {"3": {"n": 1}}  # type: ignore[index]
    clock.now += 1000
    assert engine.read(NS, "pr:room")["value"] == {}  # type: ignore[index]


def populate(engine: Engine) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    bodies: list[tuple[str, Any, int]] = [
        ("gc:a", {"op": "increment", "amount": 3, "op_id": "g1"}, 1),
        ("pn:b", [{"op": "increment", "amount": 5}, {"op": "decrement", "amount": 2}], 2),
        ("or:c", {"op": "add", "element": {"k": [1, 2]}}, 1),
        ("lw:d", {"op": "set", "value": "v", "op_id": "l1"}, 3),
        ("pr:e", {"op": "update", "data": {"x": 1}}, 4),
        (
            "tr:f",
            [
                {"op": "add", "id": "n1"},
                {"op": "add", "id": "n2", "parent": "n1", "data": {"d": 1}},
            ],
            1,
        ),
        ("plain", {"op": "add", "type": "orset", "element": 7}, 2),
        ("or:c", {"op": "remove", "element": {"k": [1, 2]}}, 2),
    ]
    for crdt_id, body, client in bodies:
        records.extend(run(engine, crdt_id, body, client).records)
    return records


def reads(engine: Engine) -> dict[str, Any]:
    ids = sorted(entry.id for entry in engine.lru() if entry.ns == NS)
    return {i: (engine.read(NS, i), engine.read(NS, i, full=True)) for i in ids}


def test_export_import_round_trip_through_msgpack() -> None:
    engine, _ = make_engine()
    populate(engine)
    exported = msgpack.unpackb(msgpack.packb(list(engine.export_entries())))
    copy, _ = make_engine()
    for entry in exported:
        copy.import_entry(entry)
    assert reads(copy) == reads(engine)
    assert len(copy) == len(engine) == 7
    # op_ids survive: a retry after a restart is still a duplicate.
    assert run(copy, "lw:d", {"op": "set", "value": "v", "op_id": "l1"}, 3).duplicate
    # Both go on identically.
    for e in (engine, copy):
        run(e, "tr:f", {"op": "move", "id": "n2", "parent": "root"})
    assert reads(copy) == reads(engine)


def test_import_keeps_only_the_window_of_op_ids() -> None:
    engine, _ = make_engine()
    for key in "abcde":
        run(engine, "gc:a", {"op": "increment", "op_id": key})
    small, _ = make_engine(op_id_window=2, op_id_ttl_ms=0)
    for entry in engine.export_entries():
        small.import_entry(entry)
    assert list(small.get(NS, "gc:a").op_ids) == ["d", "e"]  # type: ignore[union-attr]


# -- replay ---------------------------------------------------------------


def test_replay_rebuilds_the_same_state_and_is_idempotent() -> None:
    engine, _ = make_engine()
    records = msgpack.unpackb(msgpack.packb(populate(engine)))
    other, _ = make_engine()
    assert all(other.replay(r) for r in records)
    assert reads(other) == reads(engine)
    assert not any(other.replay(r) for r in records)
    assert reads(other) == reads(engine)
    # Replayed op_ids count for duplicates on the replaying node too.
    assert run(other, "gc:a", {"op": "increment", "op_id": "g1"}).duplicate
    # The replaying node's clock follows the stamps it has seen.
    assert other.now_ms() >= records[-1]["ts"]


def test_replay_detects_gaps() -> None:
    engine, _ = make_engine()
    records = [r for b in range(4) for r in run(engine, "gc:a", {"op": "increment"}).records]
    other, _ = make_engine()
    with pytest.raises(GapError) as info:
        other.replay(records[2])
    assert (info.value.have, info.value.got) == (0, 3)
    assert other.get(NS, "gc:a") is None
    other.replay(records[0])
    with pytest.raises(GapError) as info:
        other.replay(records[3])
    assert (info.value.ns, info.value.crdt_id, info.value.have, info.value.got) == (
        NS,
        "gc:a",
        1,
        4,
    )
    for record in records[1:]:
        assert other.replay(record)
    assert other.read(NS, "gc:a") == engine.read(NS, "gc:a")


def test_replay_of_deletes_and_new_epochs() -> None:
    engine, _ = make_engine()
    old = run(engine, "gc:a", {"op": "increment"}).records
    deleted = engine.delete(NS, "gc:a")
    new = [
        r for _ in range(2) for r in run(engine, "gc:a", {"op": "increment", "amount": 5}).records
    ]
    other, _ = make_engine()
    other.replay(old[0])
    assert other.replay(deleted)  # type: ignore[arg-type]
    assert not other.replay(deleted)  # type: ignore[arg-type]
    other.replay(new[0])
    other.replay(new[1])
    assert other.read(NS, "gc:a") == engine.read(NS, "gc:a")
    # A node that missed the delete: seq 1 of a new epoch starts the new life ...
    missed, _ = make_engine()
    missed.replay(old[0])
    assert missed.replay(new[0])
    assert missed.get(NS, "gc:a").epoch == new[0]["epoch"]  # type: ignore[union-attr]
    # ... and a later op of another epoch is a gap back to that life's start.
    behind, _ = make_engine()
    behind.replay(old[0])
    with pytest.raises(GapError) as info:
        behind.replay(new[1])
    assert (info.value.have, info.value.got, info.value.epoch) == (0, 2, new[1]["epoch"])
    with pytest.raises(ValueError):
        behind.replay({"kind": "nonsense", "ns": NS, "id": "gc:a"})


def test_answer_extras_are_concatenated_across_a_batch_and_repeated_for_duplicates() -> None:
    engine, _ = make_engine()
    assert set(TYPES) == set(PREFIXES.values())
    body = [
        {"op": "insert", "index": 0, "text": "ab", "op_id": "i1"},
        {"op": "insert", "index": 2, "values": [1]},
    ]
    result = run(engine, "rg:doc", body, client_id=5)
    assert result.extra == {"ids": ["1@5", "2@5", "3@5"]}
    again = run(engine, "rg:doc", {"op": "insert", "index": 0, "text": "zz", "op_id": "i1"}, 5)
    assert (again.duplicate, again.seq, again.extra) == (True, 1, {"ids": ["1@5", "2@5"]})
    assert engine.read(NS, "rg:doc")["value"] == ["a", "b", 1]  # type: ignore[index]


def test_op_ids_are_remembered_for_the_ttl_beyond_the_window() -> None:
    engine, clock = make_engine(op_id_window=2, op_id_ttl_ms=10_000)
    run(engine, "rg:t", {"op": "insert", "index": 0, "text": "a", "op_id": "first"})
    for i in range(50):
        clock.now += 10
        run(engine, "gc:a", {"op": "increment", "op_id": f"k{i}"})
    # k0 left the window long ago but is younger than the TTL: still a repeat.
    repeat = run(engine, "gc:a", {"op": "increment", "op_id": "k0"})
    assert (repeat.duplicate, repeat.seq, repeat.records) == (True, 1, [])
    # An rga insert's answer extras survive the move to the aged tier.
    for i in range(5):
        run(engine, "rg:t", {"op": "insert", "index": 0, "text": "b", "op_id": f"r{i}"})
    first = run(engine, "rg:t", {"op": "insert", "index": 0, "text": "a", "op_id": "first"})
    assert first.duplicate and first.extra["ids"]
    # Past the TTL (and out of the window) an op_id is forgotten, in whole buckets.
    clock.now += 20_000
    for i in range(3):
        run(engine, "gc:a", {"op": "increment", "op_id": f"late{i}"})
    assert run(engine, "gc:a", {"op": "increment", "op_id": "k0"}).applied == 1
    assert not run(engine, "gc:a", {"op": "increment", "op_id": "k1"}).duplicate
    assert len(engine.get(NS, "gc:a").op_ids) < 10  # type: ignore[union-attr]


def test_aged_op_ids_survive_export_and_import() -> None:
    engine, clock = make_engine(op_id_window=4, op_id_ttl_ms=60_000)
    for i in range(3000):
        clock.now += 1
        run(engine, "gc:a", {"op": "increment", "op_id": f"id{i}"})
    exported = msgpack.unpackb(msgpack.packb(list(engine.export_entries())))
    assert exported[0]["op_id_hashes"]  # the aged tier is written
    copy, copy_clock = make_engine(op_id_window=4, op_id_ttl_ms=60_000)
    copy_clock.now = clock.now
    for entry in exported:
        copy.import_entry(entry)
    for i in (0, 1234, 2999):
        hit = run(copy, "gc:a", {"op": "increment", "op_id": f"id{i}"})
        assert (hit.duplicate, hit.seq) == (True, i + 1)
    assert run(copy, "gc:a", {"op": "increment", "op_id": "new"}).applied == 1
    # Imported long after, the aged tier has expired; the window still holds.
    later, later_clock = make_engine(op_id_window=4, op_id_ttl_ms=60_000)
    later_clock.now = clock.now + 120_000
    for entry in exported:
        later.import_entry(entry)
    assert not run(later, "gc:a", {"op": "increment", "op_id": "id5"}).duplicate
    assert run(later, "gc:a", {"op": "increment", "op_id": "id2999"}).duplicate


def test_replayed_op_ids_age_by_their_stamps() -> None:
    engine, clock = make_engine(op_id_window=1, op_id_ttl_ms=5_000)
    records = []
    for i in range(10):
        clock.now += 100
        records += run(engine, "gc:a", {"op": "increment", "op_id": f"x{i}"}).records
    other, other_clock = make_engine(op_id_window=1, op_id_ttl_ms=5_000)
    other_clock.now = clock.now
    for record in records:
        other.replay(record)
    assert run(other, "gc:a", {"op": "increment", "op_id": "x0"}).duplicate


def test_an_entry_is_measured_every_so_many_ops_or_once_after_a_run_that_defers_it() -> None:
    engine, _ = make_engine()
    measured: list[int] = []
    engine.on_measured = lambda ns, crdt_id, size: measured.append(size)
    run(engine, "rg:a", {"op": "insert", "index": 0, "text": "a"})  # created: measured
    for _ in range(RESIZE_EVERY_OPS):
        run(engine, "rg:a", {"op": "insert", "index": 0, "text": "b"})
    assert len(measured) == 2
    # A run applied with measure=False (a revert's staged ops) is measured
    # once, when the caller asks after it, as a batch of that many would be.
    for _ in range(RESIZE_EVERY_OPS + 10):
        plan = engine.plan(NS, "rg:a", {"op": "insert", "index": 0, "text": "c"})
        engine.apply(plan, 1, measure=False)
    entry = engine.get(NS, "rg:a")
    assert entry is not None and len(measured) == 2
    assert entry.unsized_ops == RESIZE_EVERY_OPS + 10
    engine.measure_if_due(NS, "rg:a")
    assert len(measured) == 3 and entry.unsized_ops == 0
    assert measured[-1] == entry.state_bytes == state_bytes(entry.crdt.state())
    engine.measure_if_due(NS, "rg:a")  # nothing due
    engine.measure_if_due(NS, "rg:gone")
    assert len(measured) == 3
    plan = engine.plan(NS, "rg:a", [{"op": "insert", "index": 0, "text": "d"}] * RESIZE_EVERY_OPS)
    engine.apply(plan, 1, measure=False)
    assert len(measured) == 3
    engine.apply(engine.plan(NS, "rg:a", {"op": "insert", "index": 0, "text": "e"}), 1)
    assert len(measured) == 4
