"""MemoryStore: the protocol without a disk, for the layers above."""

from __future__ import annotations

import pytest

from syncd.errors import ApiError
from syncd.store.memory import MemoryStore
from tests.store.support import deleted, op, seqs


async def test_appends_replay_and_restart_through_reload() -> None:
    counted: list[int] = []
    store = MemoryStore(on_written=counted.append)
    assert (await store.open()).records == []
    record = op(1)
    await store.append([record, op(2)])
    record["seq"] = 99  # later mutation by the caller is not persisted
    assert store.wal_last_seq == 2 and counted == [2]
    assert seqs(await store.ops_since("n", "gc:a", "e1", 0) or []) == [1, 2]
    assert seqs((await store.reload()).records) == [1, 2]


async def test_compaction_replaces_records_by_the_snapshot() -> None:
    store = MemoryStore()
    await store.open()
    store.set_snapshot_source(lambda: [{"ns": "n", "id": "gc:a", "seq": 2}])
    await store.append([op(1), op(2)])
    assert await store.compact_now() == 2
    await store.append([deleted()])
    recovered = await store.reload()
    assert recovered.entries == [{"ns": "n", "id": "gc:a", "seq": 2}]
    assert recovered.records == [deleted()]
    assert await store.ops_since("n", "gc:a", "e1", 0) is None


async def test_failing_writes_answer_503_and_tell_on_failure() -> None:
    told: list[BaseException] = []
    store = MemoryStore(on_failure=told.append)
    await store.open()
    store.fail_writes = True
    assert not store.ready
    with pytest.raises(ApiError) as err:
        await store.append([op(1)])
    assert err.value.status == 503 and len(told) == 1
    store.fail_writes = False
    await store.append([op(1)])
    await store.close()
    assert not store.ready
    with pytest.raises(ApiError):
        await store.append([op(2)])
