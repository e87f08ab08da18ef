"""Write failures while running: 503s, nothing acknowledged lost, nothing failed kept,
readiness off and back on by itself."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncd.errors import ApiError
from syncd.store.embedded.store import FileStore
from tests.store.conftest import MakeStore
from tests.store.support import EACCES, EIO, ENOSPC, Faults, faulty_opener, op, seqs

NO_AUTO_PROBE = 3600.0  # the tests probe by hand unless they test the timer


async def settle(store: FileStore) -> None:
    await store.append([])


async def wait_until(predicate: object, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():  # type: ignore[operator]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.005)


async def expect_503(awaitable: object) -> ApiError:
    with pytest.raises(ApiError) as err:
        await awaitable  # type: ignore[misc]
    assert err.value.status == 503 and err.value.code == "unavailable"
    return err.value


@pytest.mark.parametrize(
    ("where", "code"),
    [
        ("write", ENOSPC),
        ("write", EIO),
        ("fsync", EIO),
        ("fsync", ENOSPC),
        ("write", EACCES),
        ("write+truncate", EIO),  # the immediate cut fails too: the repair must cut
        ("fsync+truncate", EIO),
    ],
)
async def test_failed_appends_raise_503_and_acknowledged_ones_survive(
    make_store: MakeStore, where: str, code: int
) -> None:
    faults = Faults()
    store, _ = await make_store(opener=faulty_opener(faults), probe_interval=NO_AUTO_PROBE)
    for i in range(1, 6):
        await store.append([op(i)])
    assert store.ready and store.wal_last_seq == 5

    for call in where.split("+"):
        setattr(faults, f"{call}_errno", code)
    results = await asyncio.gather(
        *(store.append([op(i)]) for i in range(6, 16)), return_exceptions=True
    )
    assert all(isinstance(r, ApiError) and r.status == 503 for r in results)
    assert os.strerror(code) in results[0].message  # type: ignore[union-attr]
    assert not store.ready
    assert store.wal_last_seq == 5
    # While failed, appends are refused at once.
    await expect_503(store.append([op(6)]))

    assert not await store.probe()  # the disk still fails
    assert not store.ready
    faults.clear()
    assert await store.probe()
    assert store.ready
    await store.append([op(6, op={"after": True})])
    await store.append([op(7, op={"after": True})])
    assert store.wal_last_seq == 7
    await store.close()

    _, recovered = await make_store()
    assert seqs(recovered.records) == [1, 2, 3, 4, 5, 6, 7]
    # The failed records are gone from the files, not just skipped.
    assert [r["op"].get("after") for r in recovered.records[4:]] == [None, True, True]


async def test_appends_queued_behind_a_failed_batch_fail_too(make_store: MakeStore) -> None:
    faults = Faults()
    store, _ = await make_store(opener=faulty_opener(faults), probe_interval=NO_AUTO_PROBE)
    await store.append([op(1)])
    faults.gate = threading.Event()
    faults.entered.clear()
    first = asyncio.ensure_future(store.append([op(2)]))
    await wait_until(faults.entered.is_set)  # the batch is in the I/O thread
    queued = [asyncio.ensure_future(store.append([op(i)])) for i in (3, 4, 5)]
    await asyncio.sleep(0)
    faults.write_errno = ENOSPC
    faults.gate.set()
    for task in [first, *queued]:
        await expect_503(task)
    faults.gate = None
    faults.clear()
    assert await store.probe()
    await store.append([op(2)])
    assert store.wal_last_seq == 2  # the failed LSNs were never durable: reused
    await store.close()
    _, recovered = await make_store()
    assert seqs(recovered.records) == [1, 2]


async def test_readiness_returns_by_itself(make_store: MakeStore) -> None:
    faults = Faults()
    store, _ = await make_store(opener=faulty_opener(faults), probe_interval=0.01)
    await store.append([op(1)])
    faults.fsync_errno = EIO
    await expect_503(store.append([op(2)]))
    assert not store.ready
    await asyncio.sleep(0.05)
    assert not store.ready  # probes fail while the disk does
    faults.clear()
    await wait_until(lambda: store.ready)
    await store.append([op(2)])
    assert store.wal_last_seq == 2


async def test_on_failure_is_told_once_and_reload_gives_the_durable_state(
    make_store: MakeStore,
) -> None:
    faults = Faults()
    told: list[BaseException] = []
    store, _ = await make_store(
        opener=faulty_opener(faults), probe_interval=NO_AUTO_PROBE, on_failure=told.append
    )
    await store.append([op(1), op(2)])
    faults.fsync_errno = EIO
    await asyncio.gather(*(store.append([op(i)]) for i in range(3, 8)), return_exceptions=True)
    await expect_503(store.append([op(3)]))  # refused while failed: same episode
    assert len(told) == 1 and isinstance(told[0], OSError)

    store.set_snapshot_source(lambda: [{"memory": "holds the failed ops"}])
    recovered = await store.reload()  # readable while the disk refuses writes
    assert seqs(recovered.records) == [1, 2]
    assert seqs(await store.ops_since("n", "gc:a", "e1", 0) or []) == [1, 2]
    faults.clear()
    assert await store.probe()
    assert store.ready
    await store.append([op(3)])  # appends are the caller's to gate, not the store's
    recovered = await store.reload()
    assert seqs(recovered.records) == [1, 2, 3]
    # A new episode is told again; no snapshot of suspect memory until reload().
    faults.write_errno = ENOSPC
    await expect_503(store.append([op(4)]))
    assert len(told) == 2
    faults.clear()
    assert await store.probe()
    await expect_503(store.compact_now())
    await store.reload()
    assert await store.compact_now() == 3


async def test_failure_while_rotating_to_a_new_segment(make_store: MakeStore) -> None:
    faults = Faults()
    store, _ = await make_store(
        opener=faulty_opener(faults), segment_bytes=300, probe_interval=NO_AUTO_PROBE
    )
    for i in range(1, 4):
        await store.append([op(i)])
    faults.open_errno = EACCES  # the next segment cannot be created
    await expect_503(store.append([op(4), op(5)]))
    faults.clear()
    assert await store.probe()
    for i in range(4, 12):
        await store.append([op(i)])
    await store.close()
    _, recovered = await make_store()
    assert seqs(recovered.records) == list(range(1, 12))


async def test_unwritable_at_start_opens_unready_then_recovers(
    make_store: MakeStore, tmp_path: Path
) -> None:
    store, _ = await make_store()
    await store.append([op(1)])
    await store.close()
    faults = Faults()
    faults.open_errno = EACCES
    store, recovered = await make_store(opener=faulty_opener(faults), probe_interval=NO_AUTO_PROBE)
    assert seqs(recovered.records) == [1]
    assert not store.ready
    await expect_503(store.append([op(2)]))
    faults.clear()
    assert await store.probe()
    await store.append([op(2)])
    await store.close()
    _, recovered = await make_store()
    assert seqs(recovered.records) == [1, 2]


async def test_a_snapshot_over_failed_records_is_not_published(
    make_store: MakeStore, tmp_path: Path
) -> None:
    faults = Faults()
    store, _ = await make_store(opener=faulty_opener(faults), probe_interval=NO_AUTO_PROBE)
    state = {"n": 0}
    store.set_snapshot_source(lambda: [{"ns": "n", "id": "gc:a", "seq": state["n"]}])
    await store.append([op(1)])
    faults.gate = threading.Event()
    faults.entered.clear()
    writing = asyncio.ensure_future(store.append([op(2)]))
    state["n"] = 2  # memory holds op 2, whose record is in flight
    await wait_until(faults.entered.is_set)
    snapshot = asyncio.ensure_future(store.compact_now())
    await asyncio.sleep(0.02)
    faults.fsync_errno = EIO
    faults.gate.set()
    await expect_503(writing)
    await expect_503(snapshot)
    faults.gate = None
    faults.clear()
    assert await store.probe()
    await store.close()
    snap_dir = tmp_path / "data" / "snapshots"
    assert os.listdir(snap_dir) == []
    _, recovered = await make_store()
    assert recovered.entries == [] and seqs(recovered.records) == [1]


@contextlib.contextmanager
def small_tmpfs(mount_point: Path, size: str = "1m") -> Iterator[Path]:
    mount_point.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


async def test_real_disk_full_on_a_small_tmpfs(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "mnt") as mnt:
        filler = mnt / "filler"
        filler.write_bytes(b"\0" * 700_000)
        store = FileStore(mnt / "data", probe_interval=NO_AUTO_PROBE)
        await store.open()
        try:
            acked: list[int] = []
            refused = 0
            for i in range(1, 400):
                try:
                    await store.append([op(i, op={"blob": "x" * 2000})])
                    acked.append(i)
                except ApiError as err:
                    assert err.status == 503 and "No space left" in err.message
                    refused += 1
                    break
            assert refused == 1 and acked, "the tmpfs never filled up"
            assert not store.ready
            assert not await store.probe()
            filler.unlink()
            assert await store.probe()
            assert store.ready
            nxt = acked[-1] + 1
            await store.append([op(nxt)])
            acked.append(nxt)
        finally:
            await store.close()
        again = FileStore(mnt / "data")
        recovered = await again.open()
        assert seqs(recovered.records) == acked
        await again.close()
