"""The op path: ``commit`` (apply once, durable on return, refusals pass
through with nothing written), ordering, and ``append`` of deletes."""

from __future__ import annotations

import asyncio

import pytest

from syncd.crdt.engine import ApplyResult
from syncd.errors import ApiError, StoreUnavailable
from tests.store.contract.backends import CLIENT, NS, Harness


def seqs(records: list[dict[str, object]]) -> list[object]:
    return [r["seq"] for r in records]


async def test_commit_calls_apply_once_and_returns_its_result_once_durable(
    backend: Harness,
) -> None:
    store, engine = backend.store, backend.engine
    wal = store.wal_last_seq
    await backend.ensure("gc:a")
    plan = engine.plan(NS, "gc:a", {"op": "increment", "amount": 2})
    results: list[ApplyResult] = []

    def apply() -> ApplyResult:
        results.append(engine.apply(plan, CLIENT))
        return results[-1]

    result = await store.commit(NS, "gc:a", apply)
    assert len(results) == 1 and result is results[0]
    entry = engine.get(NS, "gc:a")
    assert entry is not None
    (record,) = result.records
    assert (record["kind"], record["id"], record["seq"], record["epoch"]) == (
        "op",
        "gc:a",
        1,
        entry.epoch,
    )
    # Durable when commit returns: the store gives it back now.
    assert await backend.stored("gc:a") == backend.state("gc:a")
    assert store.holds(NS, "gc:a", entry.epoch, 1)
    assert store.wal_last_seq > wal

    batch = await backend.commit("gc:a", [{"op": "increment"}] * 3)
    assert batch.seq == 4 and seqs(batch.records) == [2, 3, 4]
    before = backend.state("gc:a")
    await backend.restart()
    assert await backend.stored("gc:a") == before


async def test_an_api_error_from_apply_passes_through_and_nothing_is_written(
    backend: Harness,
) -> None:
    store, engine = backend.store, backend.engine
    await backend.commit("gc:a", {"op": "increment"})
    counts = (store.wal_last_seq, store.stats.records_written, store.stats.batches)
    raised: list[ApiError] = []

    async def refused(crdt_id: str) -> ApiError:
        await backend.ensure(crdt_id)
        plan = engine.plan(NS, crdt_id, {"op": "increment", "amount": -1})  # planned fine

        def apply() -> ApplyResult:
            try:
                return engine.apply(plan, CLIENT)  # the counter refuses the amount
            except ApiError as exc:
                raised.append(exc)
                raise

        with pytest.raises(ApiError) as error:
            await store.commit(NS, crdt_id, apply)
        return error.value

    error = await refused("gc:a")
    assert error is raised[-1] and not isinstance(error, StoreUnavailable)
    assert (error.status, error.code) == (400, "invalid_op")
    # A CRDT the op would have created leaves no trace either.
    assert await refused("gc:new") is raised[-1]
    assert (store.wal_last_seq, store.stats.records_written, store.stats.batches) == counts
    assert store.ready
    assert await store.load(NS, "gc:new") is None
    assert [crdt_id for crdt_id, _, _ in await store.list_ids(NS, "", None, 10)] == ["gc:a"]

    assert (await backend.commit("gc:a", {"op": "increment"})).seq == 2
    await backend.restart()
    stored = await backend.stored("gc:a")
    assert stored is not None and stored["seq"] == 2


async def test_an_apply_without_records_writes_nothing_and_still_answers(
    backend: Harness,
) -> None:
    store = backend.store
    first = await backend.commit("gc:a", {"op": "increment", "op_id": "once"})
    counts = (store.wal_last_seq, store.stats.records_written, store.stats.batches)
    again = await backend.commit("gc:a", {"op": "increment", "op_id": "once"})
    assert again.duplicate and again.records == [] and again.seq == first.seq
    assert (store.wal_last_seq, store.stats.records_written, store.stats.batches) == counts


async def test_concurrent_commits_are_numbered_per_crdt_and_durable_in_that_order(
    backend: Harness,
) -> None:
    bodies = {
        "gc:x": {"op": "increment"},
        "pn:y": {"op": "decrement", "amount": 2},
        "rg:z": {"op": "insert", "index": 0, "text": "ab"},
    }
    results = await asyncio.gather(
        *(backend.commit(crdt_id, body) for _ in range(10) for crdt_id, body in bodies.items())
    )
    engine, store = backend.engine, backend.store
    states = {}
    for crdt_id in bodies:
        mine = [r for r in results if r.records[0]["id"] == crdt_id]
        assert sorted(r.seq for r in mine) == list(range(1, 11))
        loaded = await store.load(NS, crdt_id)
        assert loaded is not None
        base, records = loaded
        # Ascending and without a gap, each the record commit returned for it.
        assert base is None and seqs(records) == list(range(1, 11))
        by_seq = {r.seq: r.records[0] for r in mine}
        assert [(r["epoch"], r["ts"], r["op"]) for r in records] == [
            (by_seq[s]["epoch"], by_seq[s]["ts"], by_seq[s]["op"]) for s in range(1, 11)
        ]
        entry = engine.get(NS, crdt_id)
        assert entry is not None
        replay = await store.ops_since(NS, crdt_id, entry.epoch, 4)
        assert replay is not None and seqs(replay) == list(range(5, 11))
        states[crdt_id] = backend.state(crdt_id)
        assert await backend.stored(crdt_id) == states[crdt_id]
    await backend.restart()
    assert {crdt_id: await backend.stored(crdt_id) for crdt_id in bodies} == states


async def test_a_delete_record_ends_the_life_durably_and_a_new_life_starts_at_seq_1(
    backend: Harness,
) -> None:
    store, engine = backend.store, backend.engine
    await backend.commit("gc:d", [{"op": "increment"}] * 3)
    await backend.commit("gc:k", {"op": "increment"})
    ended = engine.get(NS, "gc:d")
    assert ended is not None
    written = store.stats.records_written
    await backend.delete("gc:d")
    # A local store writes the delete as a record; PostgreSQL ends the life in its rows.
    assert store.stats.records_written == written + (0 if backend.traits.shared else 1)
    assert await store.load(NS, "gc:d") is None
    assert await store.list_ids(NS, "", None, 10) == [("gc:k", "gcounter", 1)]
    assert await store.ops_since(NS, "gc:d", ended.epoch, 0) is None

    await backend.restart()
    assert await backend.store.load(NS, "gc:d") is None
    again = await backend.commit("gc:d", {"op": "increment", "amount": 5})
    assert again.seq == 1 and again.created
    life = backend.engine.get(NS, "gc:d")
    assert life is not None and life.epoch != ended.epoch
    stored = await backend.stored("gc:d")
    assert stored is not None and (stored["seq"], stored["epoch"]) == (1, life.epoch)
    assert await backend.store.list_ids(NS, "", None, 10) == [
        ("gc:d", "gcounter", 1),
        ("gc:k", "gcounter", 1),
    ]


async def test_append_persists_staged_op_records_on_a_local_store_only(
    backend: Harness,
) -> None:
    store, engine = backend.store, backend.engine
    await backend.ensure("gc:s")
    # Staged as CrdtService.stage does: applied in memory first, then appended.
    staged = engine.apply(engine.plan(NS, "gc:s", {"op": "increment"}), CLIENT)
    if backend.traits.shared:
        # A shared store orders ops itself: ops go through commit only.
        with pytest.raises(ValueError):
            await store.append(staged.records)
        assert await store.load(NS, "gc:s") is None
    else:
        await store.append(staged.records)
        assert await backend.stored("gc:s") == backend.state("gc:s")
    wal = store.wal_last_seq
    await store.append([])  # a barrier: everything before it is durable; writes nothing
    assert store.wal_last_seq == wal


async def test_append_soon_queues_now_and_its_future_resolves_once_durable(
    backend: Harness,
) -> None:
    store, engine = backend.store, backend.engine
    await backend.ensure("gc:n")
    # As CrdtService.apply_soon does: staged in memory, queued in the same step.
    staged = engine.apply(engine.plan(NS, "gc:n", {"op": "increment"}), CLIENT)
    if backend.traits.shared:
        # A shared store orders ops itself: append_soon takes deletes only, as append.
        with pytest.raises(ValueError):
            await store.append_soon(staged.records)
        return
    durable = store.append_soon(staged.records)
    assert isinstance(durable, asyncio.Future)
    await durable
    assert await backend.stored("gc:n") == backend.state("gc:n")
    # Several in one loop step are durable in the order they were queued.
    more = [engine.apply(engine.plan(NS, "gc:n", {"op": "increment"}), CLIENT) for _ in range(3)]
    futures = [store.append_soon(result.records) for result in more]
    done: list[int] = []
    for i, future in enumerate(futures):
        future.add_done_callback(lambda _, i=i: done.append(i))
    await asyncio.gather(*futures)
    await asyncio.sleep(0)
    assert done == [0, 1, 2]
    assert (await backend.stored("gc:n") or {})["seq"] == 4


async def test_append_soon_on_a_store_that_cannot_write_fails_with_store_unavailable(
    backend: Harness,
) -> None:
    if backend.traits.shared:
        return  # ops never take this path on a shared store (see the test above)
    store, engine = backend.store, backend.engine
    await backend.commit("gc:u", {"op": "increment"})
    await backend.break_writes()
    staged = engine.apply(engine.plan(NS, "gc:u", {"op": "increment"}), CLIENT)
    # Refused at once when the store knows, else its future fails.
    with pytest.raises(StoreUnavailable):
        await store.append_soon(staged.records)
    with pytest.raises(StoreUnavailable):
        store.append_soon(staged.records)  # now it knows
    await backend.heal()
