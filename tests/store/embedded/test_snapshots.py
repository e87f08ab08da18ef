"""Snapshots and compaction: restart keeps everything, old segments go, restart
cost follows state size rather than history."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from syncd.store.embedded.snapshot import list_snapshots
from syncd.store.embedded.store import FileStore, StoreCorruptError
from tests.store.conftest import MakeStore
from tests.store.support import deleted, op, seqs


class Model:
    """A stand-in for the engine: per-CRDT seq, exported as entry maps."""

    def __init__(self, store: FileStore) -> None:
        self.store = store
        self.seq: dict[str, int] = {}
        store.set_snapshot_source(self.export)

    def export(self) -> list[dict[str, Any]]:
        return [
            {
                "ns": "n",
                "id": crdt,
                "type": "gcounter",
                "seq": seq,
                "epoch": "e1",
                "state": {"7": seq},
            }
            for crdt, seq in sorted(self.seq.items())
        ]

    async def write(self, crdt: str, **extra: Any) -> None:
        # Apply and append in one loop step, as the engine does.
        seq = self.seq[crdt] = self.seq.get(crdt, 0) + 1
        await self.store.append([op(seq, crdt=crdt, **extra)])

    def load(self, entries: list[dict[str, Any]], records: list[dict[str, Any]]) -> None:
        self.seq = {e["id"]: e["seq"] for e in entries}
        for record in records:
            assert record["seq"] == self.seq.get(record["id"], 0) + 1
            self.seq[record["id"]] = record["seq"]


def snapshots(data_dir: Path) -> list[int]:
    return [lsn for lsn, _ in list_snapshots(str(data_dir / "snapshots"))]


async def test_snapshot_compaction_and_restart_keep_everything(
    make_store: MakeStore, tmp_path: Path
) -> None:
    store, _ = await make_store(segment_bytes=1000, fsync="never")
    model = Model(store)
    for i in range(300):
        await model.write(f"c{i % 7}")
    segments_before = len(store.log_segments)
    covered = await store.compact_now()
    assert covered == 300
    assert snapshots(tmp_path / "data") == [300]
    # Every segment whose records are all covered is gone.
    firsts = [int(os.path.basename(p).split(".")[0]) for p in store.log_segments]
    assert len(firsts) < segments_before and len(firsts) <= 2
    assert firsts[-1] <= 301
    for i in range(20):
        await model.write(f"c{i % 3}")
    expected = dict(model.seq)
    await store.close()

    again, recovered = await make_store(segment_bytes=1000)
    assert len(recovered.entries) == 7
    assert len(recovered.records) == 20  # only what came after the snapshot
    check = Model(again)
    check.load(recovered.entries, recovered.records)
    assert check.seq == expected
    assert again.wal_last_seq == 320


async def test_a_second_snapshot_replaces_the_first(make_store: MakeStore, tmp_path: Path) -> None:
    store, _ = await make_store(segment_bytes=500)
    model = Model(store)
    for i in range(50):
        await model.write(f"c{i % 5}")
    await store.compact_now()
    for i in range(50):
        await model.write(f"c{i % 5}")
    await store.compact_now()
    assert snapshots(tmp_path / "data") == [100]
    await store.close()
    _, recovered = await make_store()
    assert {e["id"]: e["seq"] for e in recovered.entries} == {f"c{i}": 20 for i in range(5)}
    assert recovered.records == []


async def test_snapshot_taken_automatically_when_the_log_grows(
    make_store: MakeStore, tmp_path: Path
) -> None:
    store, _ = await make_store(snapshot_every_bytes=2000)
    model = Model(store)
    for _ in range(15):  # ~110 bytes per record: under the threshold
        await model.write("a")
    assert store.stats.snapshots == 0
    for _ in range(10):
        await model.write("a")
    await wait_for_snapshots(store, 1)
    assert snapshots(tmp_path / "data") != []


async def test_next_snapshot_waits_for_growth_as_large_as_the_state(
    make_store: MakeStore,
) -> None:
    """Write amplification stays bounded when the state is larger than the threshold."""
    store, _ = await make_store(snapshot_every_bytes=1000)
    big_state = {"blob": "x" * 6000}
    store.set_snapshot_source(lambda: [{"ns": "n", "id": "big", "state": big_state}])
    seq = 0

    async def write(n: int) -> None:
        nonlocal seq
        for _ in range(n):
            seq += 1
            await store.append([op(seq)])

    await write(12)  # past 1000 bytes
    await wait_for_snapshots(store, 1)
    await write(30)  # ~3300 bytes more: past the threshold, not past the state
    await asyncio.sleep(0.05)
    assert store.stats.snapshots == 1
    await write(40)  # now past the snapshot's size
    await wait_for_snapshots(store, 2)


async def wait_for_snapshots(store: FileStore, n: int) -> None:
    for _ in range(400):
        if store.stats.snapshots >= n:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{store.stats.snapshots} snapshots, expected {n}")


async def test_restart_cost_does_not_depend_on_history(tmp_path: Path) -> None:
    read: dict[int, int] = {}
    for history in (200, 4000):
        data_dir = tmp_path / f"h{history}"
        store = FileStore(data_dir, segment_bytes=4000, replay_tail_per_crdt=4, fsync="never")
        await store.open()
        model = Model(store)
        for i in range(history):
            await model.write(f"c{i % 10}")
        await store.compact_now()
        await store.close()
        again = FileStore(data_dir, segment_bytes=4000)
        recovered = await again.open()
        assert len(recovered.entries) == 10 and recovered.records == []
        read[history] = again.stats.recovery_bytes_read
        await again.close()
    # Twenty times the history, about the same bytes read: the snapshot plus at
    # most one segment holding records it already covers.
    assert read[4000] <= read[200] + 4000 + 200


async def test_replay_tail_survives_a_restart_through_the_snapshot(
    make_store: MakeStore,
) -> None:
    store, _ = await make_store()
    model = Model(store)
    for _ in range(10):
        await model.write("a")
    await model.write("gone")
    await store.compact_now()
    await model.write("a")
    await store.append([deleted("gone")])
    await store.close()
    again, recovered = await make_store()
    assert seqs(await again.ops_since("n", "a", "e1", 5) or []) == [6, 7, 8, 9, 10, 11]
    assert await again.ops_since("n", "gone", "e1", 0) is None


async def test_damaged_newest_snapshot_falls_back_while_the_log_covers_it(
    make_store: MakeStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, _ = await make_store()  # one big segment: compaction deletes nothing
    model = Model(store)
    for i in range(30):
        await model.write(f"c{i % 3}")
    await store.compact_now()
    await store.close()
    (lsn, path) = list_snapshots(str(tmp_path / "data" / "snapshots"))[0]
    data = bytearray(Path(path).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    again, recovered = await make_store()
    assert "damaged" in caplog.text
    assert recovered.entries == [] and len(recovered.records) == 30


async def test_damaged_snapshot_without_the_log_behind_it_refuses(
    make_store: MakeStore, tmp_path: Path
) -> None:
    store, _ = await make_store(segment_bytes=300)
    model = Model(store)
    for i in range(30):
        await model.write(f"c{i % 3}")
    await store.compact_now()
    await store.close()
    (_, path) = list_snapshots(str(tmp_path / "data" / "snapshots"))[0]
    data = bytearray(Path(path).read_bytes())
    data[-3] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    with pytest.raises(StoreCorruptError, match=os.path.basename(path)):
        await FileStore(tmp_path / "data").open()


async def test_a_truncated_snapshot_is_invalid(make_store: MakeStore, tmp_path: Path) -> None:
    store, _ = await make_store()
    model = Model(store)
    for i in range(5):
        await model.write(f"c{i}")
    await store.compact_now()
    await store.close()
    (_, path) = list_snapshots(str(tmp_path / "data" / "snapshots"))[0]
    full = Path(path).read_bytes()
    for cut in (0, 10, len(full) // 2, len(full) - 1):
        Path(path).write_bytes(full[:cut])
        again, recovered = await make_store()  # falls back to the whole log
        assert recovered.entries == [] and len(recovered.records) == 5
        await again.close()


async def test_snapshot_source_errors_are_reported(make_store: MakeStore) -> None:
    store, _ = await make_store()

    def broken() -> list[dict[str, Any]]:
        raise RuntimeError("engine bug")

    with pytest.raises(RuntimeError, match="needs a snapshot source"):
        await store.compact_now()
    store.set_snapshot_source(broken)
    with pytest.raises(RuntimeError, match="engine bug"):
        await store.compact_now()
    store.set_snapshot_source(lambda: [{"x": object()}])
    with pytest.raises(TypeError):
        await store.compact_now()
    assert os.listdir(Path(store.data_dir) / "snapshots") == []
    await store.append([op(1)])  # the log is unharmed
    assert store.ready


async def test_snapshot_entries_round_trip_opaque(make_store: MakeStore) -> None:
    store, _ = await make_store()
    entries = [
        {"ns": "n", "id": "x", "state": {"nested": [1, {"k": b"\x00"}], 3: None}, "op_ids": ["a"]},
        {"ns": "n", "id": "y", "state": None, "op_ids": []},
    ]
    store.set_snapshot_source(lambda: entries)
    await store.append([op(1)])
    await store.compact_now()
    await store.close()
    _, recovered = await make_store()
    assert recovered.entries == entries and recovered.records == []
