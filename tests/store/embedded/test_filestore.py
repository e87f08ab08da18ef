"""FileStore basics: round trip, group commit, ordering, fsync modes, rotation, limits."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from syncd.errors import ApiError
from syncd.store.embedded import commit as group_commit
from syncd.store.embedded.store import FileStore
from tests.store.conftest import MakeStore
from tests.store.support import deleted, op, seqs


async def test_round_trip_keeps_records_exactly_and_in_order(
    make_store: MakeStore, tmp_path: Path
) -> None:
    store, recovered = await make_store()
    assert recovered.entries == [] and recovered.records == []
    records = [
        op(1),
        op(2, op_id="x" * 128),
        op(3, op={"op": "add", "element": {"k": [1, 2.5, None, True, "é"]}, "dots": {"7": 3}}),
        {"kind": "op", "ns": "n", "id": "b", "seq": 1, "epoch": "e", "op": {"big": 2**63 - 1}},
        {"kind": "op", "ns": "n", "id": "b", "seq": 2, "epoch": "e", "op": {1: b"\x00\xff"}},
        deleted("b"),
    ]
    await store.append(records[:2])
    for record in records[2:]:
        await store.append([record])
    assert store.wal_last_seq == len(records)
    await store.close()

    again, recovered = await make_store()
    assert recovered.records == records
    assert again.wal_last_seq == len(records)
    await again.append([op(4)])
    assert again.wal_last_seq == len(records) + 1  # LSNs continue across restarts


async def test_group_commit_batches_concurrent_appends(make_store: MakeStore) -> None:
    store, _ = await make_store()
    before = store.stats.fsyncs
    await asyncio.gather(*(store.append([op(i + 1, crdt=f"c{i}")]) for i in range(200)))
    assert store.wal_last_seq == 200
    assert store.stats.records_written == 200
    # All 200 were queued in one loop turn: one write and one fsync carry them.
    assert store.stats.fsyncs - before <= 2
    assert store.stats.batches <= 2


async def test_always_mode_fsyncs_every_append_call(make_store: MakeStore) -> None:
    store, _ = await make_store(fsync="always")
    before = store.stats.fsyncs
    await asyncio.gather(
        *(store.append([op(1, crdt=f"c{i}"), op(2, crdt=f"c{i}")]) for i in range(20))
    )
    assert store.stats.fsyncs - before == 20
    assert store.wal_last_seq == 40


async def test_never_mode_writes_without_fsync_and_keeps_order(
    make_store: MakeStore, tmp_path: Path
) -> None:
    store, _ = await make_store(fsync="never")
    before = store.stats.fsyncs
    await asyncio.gather(*(store.append([op(i + 1)]) for i in range(50)))
    assert store.stats.fsyncs == before
    assert store.wal_last_seq == 50
    await store.close()
    _, recovered = await make_store()
    assert seqs(recovered.records) == list(range(1, 51))


async def test_appends_resolve_in_call_order_and_land_in_call_order(
    make_store: MakeStore,
) -> None:
    store, _ = await make_store(max_batch_bytes=500)  # several batches
    done: list[int] = []

    async def writer(i: int) -> None:
        await store.append([op(i)])
        done.append(i)

    await asyncio.gather(*(writer(i) for i in range(1, 101)))
    assert done == list(range(1, 101))
    assert store.stats.batches > 5
    await store.close()
    _, recovered = await make_store()
    assert seqs(recovered.records) == list(range(1, 101))


async def test_max_batch_bytes_bounds_one_write(make_store: MakeStore) -> None:
    store, _ = await make_store(max_batch_bytes=1000)
    await asyncio.gather(*(store.append([op(i)]) for i in range(1, 101)))
    # A record frame is ~110 bytes: at most ~9 fit under the bound per batch.
    assert store.stats.batches >= 100 * 110 // 1000
    assert store.stats.bytes_written / store.stats.batches <= 1000


async def test_empty_append_is_a_barrier(make_store: MakeStore) -> None:
    store, _ = await make_store()
    first = asyncio.ensure_future(store.append([op(1)]))
    await asyncio.sleep(0)  # let it queue its record
    await store.append([])
    assert first.done() and store.wal_last_seq == 1
    await first


async def test_rotation_at_segment_bytes(make_store: MakeStore) -> None:
    store, _ = await make_store(segment_bytes=1000)
    for i in range(1, 101):
        await store.append([op(i)])
    segments = store.log_segments
    assert len(segments) >= 10
    names = [int(os.path.basename(p).split(".")[0]) for p in segments]
    assert names == sorted(names) and names[0] == 1
    await store.close()
    # A segment is rotated once it reaches the limit: at most one batch past it
    # (a closed log ends at its last record: the runway is given back).
    for path in segments:
        assert os.path.getsize(path) < 1000 + 200
    _, recovered = await make_store()
    assert seqs(recovered.records) == list(range(1, 101))


async def test_on_written_counts_records(make_store: MakeStore) -> None:
    counted: list[int] = []
    store, _ = await make_store(on_written=counted.append)
    await asyncio.gather(store.append([op(1), op(2)]), store.append([op(3)]))
    await store.append([op(4)])
    assert sum(counted) == 4


async def test_close_flushes_pending_appends(make_store: MakeStore) -> None:
    store, _ = await make_store()
    tasks = [asyncio.ensure_future(store.append([op(i)])) for i in range(1, 31)]
    await asyncio.sleep(0)
    await store.close()
    await asyncio.gather(*tasks)
    with pytest.raises(ApiError) as err:
        await store.append([op(99)])
    assert err.value.status == 503
    assert not store.ready
    _, recovered = await make_store()
    assert seqs(recovered.records) == list(range(1, 31))


async def test_append_before_open_is_a_programming_error(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "d")
    with pytest.raises(RuntimeError):
        await store.append([op(1)])
    assert not store.ready


def test_unknown_fsync_mode_and_bad_sizes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fsync"):
        FileStore(tmp_path, fsync="sometimes")
    with pytest.raises(ValueError):
        FileStore(tmp_path, segment_bytes=0)
    with pytest.raises(ValueError):
        FileStore(tmp_path, probe_interval=0)


async def test_oversized_record_is_refused_and_reported(
    make_store: MakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    failures: list[BaseException] = []
    store, _ = await make_store(on_failure=failures.append)
    monkeypatch.setattr(group_commit, "MAX_RECORD_BYTES", 300)
    await store.append([op(1)])
    with pytest.raises(ApiError) as err:
        await store.append([op(2, op={"blob": "x" * 400})])
    assert err.value.status == 413
    assert len(failures) == 1  # the caller may have applied it: it is told
    await store.append([op(2)])  # nothing was consumed: the log goes on
    assert store.wal_last_seq == 2


async def test_a_record_must_be_a_map(make_store: MakeStore) -> None:
    store, _ = await make_store()
    with pytest.raises(TypeError):
        await store.append([["not", "a", "map"]])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        await store.append([{"kind": "op", "op": object()}])
    assert store.wal_last_seq == 0 and store.ready


async def test_ops_since_is_served_after_appends_and_after_restart(
    make_store: MakeStore,
) -> None:
    store, _ = await make_store()
    for i in range(1, 11):
        await store.append([op(i)])
    assert seqs(await store.ops_since("n", "gc:a", "e1", 7) or []) == [8, 9, 10]
    await store.close()
    again, _ = await make_store()
    assert seqs(await again.ops_since("n", "gc:a", "e1", 0) or []) == list(range(1, 11))
    assert await again.ops_since("n", "gc:a", "e2", 0) is None


@pytest.mark.parametrize("runway", [True, False])
async def test_the_runway_runs_ahead_of_the_records_while_syncing(
    make_store: MakeStore, runway: bool
) -> None:
    store, _ = await make_store(fsync="batch", log_runway=runway)
    for i in range(1, 11):
        await store.append([op(i)])
    (segment,) = store.log_segments
    written = store.stats.bytes_written
    size = os.path.getsize(segment)
    if runway:
        assert size >= written + 1024 * 1024 // 2  # zeros ahead of the records
        assert not any(Path(segment).read_bytes()[written:])
    else:
        assert size == written
    await store.close()
    assert os.path.getsize(segment) == written  # a clean stop gives the zeros back
