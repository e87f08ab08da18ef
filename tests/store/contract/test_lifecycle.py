"""A store's life: ``open`` and recovery, ``reload``, failure (``ready`` and
``StoreUnavailable``), and ``close``."""

from __future__ import annotations

import asyncio
import functools

import pytest

from syncd.crdt.engine import ApplyResult, Engine
from syncd.errors import StoreUnavailable
from tests.store.contract.backends import CLIENT, NS, Harness

DELETED = {"kind": "deleted", "ns": NS, "id": "gc:never"}


async def test_a_new_store_opens_empty_and_is_ready_only_once_open(backend: Harness) -> None:
    store = backend.store
    assert list(backend.recovered.entries) == [] and list(backend.recovered.records) == []
    assert store.ready and store.wal_last_seq == 0
    assert await store.list_ids(NS, "", None, 10) == []
    assert await store.load(NS, "gc:a") is None
    unopened = backend.unopened()
    assert not unopened.ready
    await unopened.close()  # closing a store never opened is harmless


async def test_what_was_committed_comes_back_after_a_restart(backend: Harness) -> None:
    await backend.commit("gc:gone", {"op": "increment"})
    await backend.commit("gc:r", [{"op": "increment"}] * 3)
    await backend.commit("lw:r", {"op": "set", "value": "v"})
    await backend.delete("gc:gone")
    states = {crdt_id: backend.state(crdt_id) for crdt_id in ("gc:r", "lw:r")}
    wal = backend.store.wal_last_seq
    assert wal > 0

    recovered = await backend.restart()
    entries, records = list(recovered.entries), list(recovered.records)
    if backend.traits.recovers_records:
        # Fed to an engine in order (App.load_state), they rebuild the state.
        engine = Engine()
        for entry in entries:
            engine.import_entry(entry)
        for record in records:
            engine.replay(record)
        assert {crdt_id: engine.read(NS, crdt_id, full=True) for crdt_id in states} == states
        assert engine.read(NS, "gc:gone") is None
    else:
        assert entries == [] and records == []  # every CRDT loads on demand
    store = backend.store
    assert store.ready and store.wal_last_seq == wal
    for crdt_id, state in states.items():
        assert await backend.stored(crdt_id) == state
    assert await store.load(NS, "gc:gone") is None
    assert (await backend.commit("gc:r", {"op": "increment"})).seq == 4


async def test_reload_reads_back_what_is_durable(backend: Harness) -> None:
    await backend.commit("gc:l", [{"op": "increment"}] * 3)
    await backend.commit("pn:l", {"op": "decrement"})
    recovered = await backend.store.reload()
    entries, records = list(recovered.entries), list(recovered.records)
    assert entries == []  # no snapshot yet
    if backend.traits.recovers_records:
        assert [(r["id"], r["seq"]) for r in records] == [
            ("gc:l", 1),
            ("gc:l", 2),
            ("gc:l", 3),
            ("pn:l", 1),
        ]
    else:
        assert records == []
    await backend.rebuild()
    assert backend.store.ready
    assert (await backend.commit("gc:l", {"op": "increment"})).seq == 4


async def test_a_store_that_cannot_write_raises_store_unavailable_and_keeps_what_it_acknowledged(
    backend: Harness,
) -> None:
    store = backend.store
    await backend.commit("gc:f", [{"op": "increment"}] * 2)
    durable = backend.state("gc:f")
    failures = store.stats.failures
    finds_itself = backend.traits.finds_failure_itself

    await backend.break_writes()
    # Either the store already knows (ready is off and the write is refused),
    # or the write fails: then the failure is counted and ready turns off.
    assert store.ready is not finds_itself
    with pytest.raises(StoreUnavailable) as failed:
        await backend.commit("gc:f", {"op": "increment", "amount": 100})
    assert (failed.value.status, failed.value.code) == (503, "unavailable")
    assert not store.ready
    assert store.stats.failures == failures + (0 if finds_itself else 1)
    # While it cannot write, every write is refused the same way.
    with pytest.raises(StoreUnavailable):
        await backend.commit("gc:f", {"op": "increment"})
    with pytest.raises(StoreUnavailable):
        await store.append([DELETED])

    await backend.heal()
    assert store.ready
    await backend.rebuild()  # what the service does before it writes again
    assert await backend.stored("gc:f") == durable  # nothing refused became durable
    assert (await backend.commit("gc:f", {"op": "increment"})).seq == 3
    await backend.restart()
    stored = await backend.stored("gc:f")
    assert stored is not None and stored["seq"] == 3


async def test_close_keeps_every_acknowledged_commit_and_refuses_after(
    backend: Harness,
) -> None:
    await backend.commit("gc:c", {"op": "increment"})
    store, engine = backend.store, backend.engine
    writes = [
        asyncio.ensure_future(
            store.commit(
                NS,
                "gc:c",
                functools.partial(
                    engine.apply, engine.plan(NS, "gc:c", {"op": "increment"}), CLIENT
                ),
            )
        )
        for _ in range(5)
    ]
    await asyncio.sleep(0)  # every commit has been called
    await backend.close()
    outcomes = await asyncio.gather(*writes, return_exceptions=True)
    # Each is answered: durable, or refused (a shared store refuses what it
    # had not started to commit).
    assert all(isinstance(o, ApplyResult | StoreUnavailable) for o in outcomes), outcomes
    acknowledged = sorted(o.seq for o in outcomes if isinstance(o, ApplyResult))
    assert acknowledged == list(range(2, 2 + len(acknowledged)))
    assert not store.ready
    with pytest.raises(StoreUnavailable):
        await store.commit(
            NS, "gc:c", lambda: engine.apply(engine.plan(NS, "gc:c", {"op": "increment"}), CLIENT)
        )
    with pytest.raises(StoreUnavailable):
        await store.append([DELETED])
    await backend.close()  # twice: harmless

    await backend.restart()
    stored = await backend.stored("gc:c")
    assert stored is not None and stored["seq"] == 1 + len(acknowledged)
