"""What a store counts: ``Store.stats`` (the counters that do not apply to a
backend stay 0, see ``Traits.counts_io``), and each namespace's usage for
the quotas (``note_size``, ``usage``, ``usage_now``, ``usages``,
``unmeasured``)."""

from __future__ import annotations

from syncd.store.base import Usage
from tests.store.contract.backends import NS, PG_SNAPSHOT_EVERY, Harness


async def test_stats_count_batches_records_snapshots_and_io_where_it_applies(
    backend: Harness,
) -> None:
    stats = backend.store.stats
    assert (stats.batches, stats.records_written, stats.snapshots, stats.failures) == (0, 0, 0, 0)
    for n in (1, 2, 3):  # one durable batch each
        await backend.commit("gc:s", [{"op": "increment"}] * n)
    assert (stats.batches, stats.records_written) == (3, 6)
    await backend.commit("gc:s", {"op": "increment", "op_id": "k"})
    await backend.commit("gc:s", {"op": "increment", "op_id": "k"})  # nothing to write
    assert (stats.batches, stats.records_written) == (4, 7)
    await backend.commit("gc:t", {"op": "increment"})
    await backend.delete("gc:t")
    # A local store writes the delete as a record; PostgreSQL ends the life in its rows.
    deletes = 0 if backend.traits.shared else 1
    assert (stats.batches, stats.records_written) == (5 + deletes, 8 + deletes)
    counts_io = backend.traits.counts_io
    if counts_io:
        assert stats.bytes_written > 0 and stats.fsyncs > 0
    else:
        assert (stats.bytes_written, stats.fsyncs) == (0, 0)
    assert (stats.recovered_records, stats.recovery_bytes_read) == (0, 0)  # opened empty
    written = stats.records_written

    await backend.restart()
    stats = backend.store.stats
    if counts_io:
        assert stats.recovered_records == written and stats.recovery_bytes_read > 0
    else:
        assert (stats.recovered_records, stats.recovery_bytes_read) == (0, 0)

    # PostgreSQL writes a snapshot when a seq crosses a multiple of its
    # snapshot_every; the local stores take one on request.
    await backend.commit("pn:big", [{"op": "increment"}] * PG_SNAPSHOT_EVERY)
    await backend.snapshot()
    assert stats.snapshots == 1
    assert stats.failures == 0


async def test_usage_counts_live_crdts_and_the_sizes_reported_for_them(backend: Harness) -> None:
    store = backend.store
    assert store.usage_now(NS) == Usage() and store.usages() == {}
    for crdt_id, bodies in (
        ("gc:u1", [{"op": "increment"}]),
        ("lw:u2", [{"op": "set", "value": "v" * 100}]),
        ("or:u3", [{"op": "add", "element": i} for i in range(3)]),
    ):
        await backend.commit(crdt_id, bodies)
    await backend.commit("gc:elsewhere", {"op": "increment"}, ns="m")

    def exact() -> Usage:
        sizes = [size for (ns, _), size in backend.noted.items() if ns == NS]
        return Usage(crdts=len(sizes), bytes=sum(sizes))

    assert all(size > 0 for size in backend.noted.values())
    assert await store.usage(NS) == exact()  # PostgreSQL: read now (not read before)
    assert store.usage_now(NS) == exact()  # what usage() just said
    assert store.usages()[NS] == exact()
    # A local store knows every namespace now; PostgreSQL those it has read.
    assert ("m" in store.usages()) is not backend.traits.shared
    assert store.unmeasured(10) == []

    before = store.usage_now(NS)
    await backend.commit("lw:u2", {"op": "set", "value": "w" * 300})
    if backend.traits.shared:
        # Figures read at most USAGE_REFRESH_S ago plus a bound of what this
        # node wrote since, not the sizes (another node may write too).
        grown = store.usage_now(NS)
        assert grown.crdts == before.crdts and grown.bytes > before.bytes
    else:
        assert store.usage_now(NS) == exact()

    await backend.delete("gc:u1")
    assert await store.usage(NS) == exact()  # PostgreSQL reads again after a delete
    expected = exact()
    assert expected.crdts == 2
    await backend.restart()
    assert await backend.store.usage(NS) == expected
    assert backend.store.unmeasured(10) == []
