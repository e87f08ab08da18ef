"""Recovered log records stay encoded until iterated: chunking, order, the replay
tail's share, and records whose frame is right but whose body is not one map."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest

from syncd.store.embedded.log import (
    FLAG_BATCH_START,
    RecordChunk,
    StoreCorruptError,
    check_segment,
    frame,
    segment_name,
)
from syncd.store.embedded.records import LogRecords
from syncd.store.embedded.store import FileStore
from tests.store.support import op, seqs


def write_segment(path: Path, bodies: list[bytes]) -> list[int]:
    """One batch of ``bodies`` as records 1..n; the offset of each frame."""
    offsets, data = [], b""
    for i, body in enumerate(bodies):
        offsets.append(len(data))
        data += frame(i + 1, body, FLAG_BATCH_START if i == 0 else 0)
    path.write_bytes(data)
    return offsets


def check(path: Path, chunk_bytes: int, skip_upto: int = 0) -> list[RecordChunk]:
    chunks: list[RecordChunk] = []
    check_segment(
        str(path), 1, skip_upto, chunks, limit=None, tolerate_tail=False, chunk_bytes=chunk_bytes
    )
    return chunks


def test_records_come_back_in_order_whatever_the_chunk_size(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    records = [op(i, note="x" * (i % 7) * 50) for i in range(1, 41)]
    write_segment(path, [msgpack.packb(r) for r in records])
    for chunk_bytes in (1, 300, 1000, 1 << 20):
        chunks = check(path, chunk_bytes)
        assert sum(c.count for c in chunks) == 40
        assert [c.first_lsn for c in chunks] == sorted({c.first_lsn for c in chunks})
        got = LogRecords(chunks)
        assert len(got) == 40 and list(got) == records and got == records
        assert got[0] == records[0] and got[-1] == records[-1] and got[17] == records[17]
        assert got[5:9] == records[5:9]
        with pytest.raises(IndexError):
            got[40]
    assert len(check(path, 1)) == 40  # a chunk closes once it holds chunk_bytes


def test_skipped_records_are_checked_but_not_kept(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    write_segment(path, [msgpack.packb(op(i)) for i in range(1, 11)])
    got = LogRecords(check(path, 200, skip_upto=6))
    assert seqs(list(got)) == [7, 8, 9, 10]


def test_last_gives_the_tail_with_sequence_numbers_and_shares_the_maps(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    write_segment(path, [msgpack.packb(op(i)) for i in range(1, 31)])
    got = LogRecords(check(path, 300))
    recent = got.last(7)
    assert [lsn for lsn, _ in recent] == list(range(24, 31))
    assert [r["seq"] for _, r in recent] == list(range(24, 31))
    # The replay sees the very maps the replay tail holds, not copies.
    replayed = list(got)
    assert all(r is replayed[lsn - 1] for lsn, r in recent)
    assert [lsn for lsn, _ in got.last(100)] == list(range(1, 31))
    assert LogRecords([]).last(5) == [] and list(LogRecords([])) == []


def test_a_checksummed_body_that_is_not_one_map_refuses_naming_file_and_offset(
    tmp_path: Path,
) -> None:
    path = tmp_path / "seg"
    bad_bodies = [
        msgpack.packb([1, 2]),  # not a map
        msgpack.packb({"a": 1}) + msgpack.packb({"b": 2}),  # two maps in one record
        b"\xc1",  # a byte msgpack never uses
    ]
    for bad in bad_bodies:
        bodies = [msgpack.packb(op(i)) for i in range(1, 6)]
        bodies[3] = bad
        offsets = write_segment(path, bodies)
        got = LogRecords(check(path, 1 << 20))  # the frames themselves are sound
        with pytest.raises(
            StoreCorruptError, match=rf"{path}: undecodable record at offset {offsets[3]}"
        ):
            list(got)


async def test_a_reopened_store_replays_a_log_longer_than_its_tail(tmp_path: Path) -> None:
    store = FileStore(tmp_path, fsync="never", replay_tail_per_crdt=10)
    await store.open()
    for i in range(0, 300, 30):
        await store.append([op(i + j + 1, note="y" * 200) for j in range(30)])
    await store.close()
    again = FileStore(tmp_path, fsync="never", replay_tail_per_crdt=10)
    recovered = await again.open()
    assert isinstance(recovered.records, LogRecords)
    assert seqs(list(recovered.records)) == list(range(1, 301))
    assert again.stats.recovered_records == 300
    held = await again.ops_since("n", "gc:a", "e1", 290)
    assert held is not None and seqs(held) == list(range(291, 301))
    assert await again.ops_since("n", "gc:a", "e1", 289) is None
    await again.close()
    assert (tmp_path / "log" / segment_name(1)).exists()
