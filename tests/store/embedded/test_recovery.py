"""Recovery: torn tails are cut, damage a crash cannot explain refuses to start,
the data directory is locked against a second store."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import msgpack
import pytest

from syncd.store.embedded.history_files import HistoryFiles
from syncd.store.embedded.log import FLAG_BATCH_START, HEADER, LENGTH_MASK, segment_name
from syncd.store.embedded.store import FileStore, StoreCorruptError, StoreLockedError
from tests.store.conftest import MakeStore
from tests.store.support import op, seqs


def frame_spans(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every frame in a well-formed segment."""
    spans = []
    off = 0
    while off < len(data):
        word, _, _ = HEADER.unpack_from(data, off)
        end = off + HEADER.size + (word & LENGTH_MASK)
        spans.append((off, end))
        off = end
    return spans


async def write_log(data_dir: Path, batches: list[int], **kwargs: object) -> bytes:
    """Append ``batches`` (records per append call, each awaited alone), close, and
    return the one segment's bytes."""
    store = FileStore(data_dir, **kwargs)  # type: ignore[arg-type]
    await store.open()
    seq = 0
    for size in batches:
        await store.append([op(seq + i + 1) for i in range(size)])
        seq += size
    await store.close()
    (segment,) = [p for p in store.log_segments if os.path.getsize(p)]
    return Path(segment).read_bytes()


def plant(data_dir: Path, data: bytes, first_lsn: int = 1) -> Path:
    log_dir = data_dir / "log"
    log_dir.mkdir(parents=True)
    path = log_dir / segment_name(first_lsn)
    path.write_bytes(data)
    return path


async def test_torn_tail_at_every_byte_of_the_last_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = await write_log(tmp_path / "orig", [1, 1, 1, 1, 1])
    start, end = frame_spans(data)[-1]
    assert end == len(data)
    for cut in range(start, end + 1):
        data_dir = tmp_path / f"cut{cut}"
        plant(data_dir, data[:cut])
        caplog.clear()
        store = FileStore(data_dir)
        recovered = await store.open()
        whole = cut == end
        assert seqs(recovered.records) == ([1, 2, 3, 4, 5] if whole else [1, 2, 3, 4])
        cut_warnings = [r for r in caplog.records if "cutting" in r.getMessage()]
        if cut in (start, end):
            assert not cut_warnings  # a clean end: nothing torn
        else:
            assert len(cut_warnings) == 1 and f"cutting {cut - start} bytes" in (
                cut_warnings[0].getMessage()
            )
            assert cut_warnings[0].levelno == logging.WARNING
        # The log goes on after the cut, and the next start sees a clean log.
        await store.append([op(6)])
        await store.close()
        again = FileStore(data_dir)
        recovered = await again.open()
        assert seqs(recovered.records) == ([1, 2, 3, 4, 5, 6] if whole else [1, 2, 3, 4, 6])
        await again.close()


async def test_zeros_after_the_last_record_are_a_clean_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What a crash leaves of a log written with fsync: the runway's zeros after
    the last record. Nothing is torn, so nothing is cut and nothing is said."""
    data = await write_log(tmp_path / "orig", [1, 2, 3])
    plant(tmp_path / "d", data + bytes(5000))
    store = FileStore(tmp_path / "d")
    recovered = await store.open()
    assert seqs(recovered.records) == [1, 2, 3, 4, 5, 6]
    assert "cutting" not in caplog.text
    await store.close()


async def test_a_crash_with_the_runway_in_place_recovers_every_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = FileStore(tmp_path / "live", fsync="batch")
    await store.open()
    for i in range(1, 21):
        await store.append([op(i)])
    (segment,) = store.log_segments
    on_disk = Path(segment).read_bytes()  # as a crash right now would leave it
    records_end = frame_spans(on_disk.rstrip(b"\0"))[-1][1]
    assert len(on_disk) > records_end + 512 * 1024  # the runway is there
    assert not any(on_disk[records_end:])
    await store.close()
    plant(tmp_path / "crashed", on_disk)
    again = FileStore(tmp_path / "crashed")
    recovered = await again.open()
    assert seqs(recovered.records) == list(range(1, 21))
    assert "cutting" not in caplog.text
    await again.append([op(21)])
    await again.close()


@pytest.mark.parametrize(
    "garbage",
    [
        os.urandom(3000),
        b"\xff" * 17,
        b"\0" * 16 + b"\x01",
        # A batch torn inside the runway with only its later pages written:
        # zeros, then bytes that are no frame, then the runway's zeros.
        bytes(4096) + b"\x13" * 300 + bytes(8192),
    ],
)
async def test_garbage_after_the_last_record_is_cut(
    tmp_path: Path, garbage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    data = await write_log(tmp_path / "orig", [1, 2, 3])
    plant(tmp_path / "d", data + garbage)
    store = FileStore(tmp_path / "d")
    recovered = await store.open()
    assert seqs(recovered.records) == [1, 2, 3, 4, 5, 6]
    assert f"cutting {len(garbage)} bytes" in caplog.text
    await store.close()


async def test_flipped_byte_in_the_middle_refuses_with_file_and_offset(tmp_path: Path) -> None:
    data = await write_log(tmp_path / "orig", [1, 1, 1, 1, 1])
    start, end = frame_spans(data)[2]
    damaged = bytearray(data)
    damaged[(start + end) // 2] ^= 0x40
    path = plant(tmp_path / "d", bytes(damaged))
    store = FileStore(tmp_path / "d")
    with pytest.raises(StoreCorruptError) as err:
        await store.open()
    assert str(path) in str(err.value) and f"offset {start}" in str(err.value)
    # The refused store let go of the directory and changed nothing on disk.
    assert path.read_bytes() == bytes(damaged)
    other = FileStore(tmp_path / "d")
    with pytest.raises(StoreCorruptError):
        await other.open()


async def test_flipped_byte_in_the_last_record_is_cut(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = await write_log(tmp_path / "orig", [1, 1, 1])
    start, end = frame_spans(data)[-1]
    for at in (start + 1, start + 6, start + 12, end - 1):  # length, crc, lsn, body
        damaged = bytearray(data)
        damaged[at] ^= 0x01
        plant(tmp_path / f"d{at}", bytes(damaged))
        caplog.clear()
        store = FileStore(tmp_path / f"d{at}")
        recovered = await store.open()
        assert seqs(recovered.records) == [1, 2]
        assert "cutting" in caplog.text
        await store.close()


async def test_damage_inside_the_last_batch_is_a_torn_write(tmp_path: Path) -> None:
    """A crash tears only the batch being written, and its pages may land in any
    order: the whole request is cut (here the batch's only one), good records
    before and after the damage too."""
    data = await write_log(tmp_path / "orig", [2, 10])
    spans = frame_spans(data)
    start, end = spans[5]  # the 4th record of the last batch
    damaged = data[:start] + b"\0" * (end - start) + data[end:]
    plant(tmp_path / "d", damaged)
    store = FileStore(tmp_path / "d")
    recovered = await store.open()
    assert seqs(recovered.records) == [1, 2]
    await store.close()


WHOLE = [6, 7]
"""The first request of the last write batch, which the tests keep whole (but for
its first record's damage, which cuts it: the damage is at it)."""
TORN = [8, 9, 10, 11]
"""The second request of the last write batch, which the tests tear."""
KEPT = [1, 2, 3, 4, 5]
"""The records of the two whole batches before it."""


def tear(segment: Path, how: str) -> None:
    """Damage the last batch (its second request, or its first record) as a crash
    while writing it can."""
    data = segment.read_bytes()
    spans = frame_spans(data)[-len(TORN) :]
    if how == "cut mid-record":  # the file ends inside the torn request's second record
        segment.write_bytes(data[: (spans[1][0] + spans[1][1]) // 2])
    elif how == "middle record damaged":  # a page of the second record lost, the rest written
        start, end = spans[1]
        segment.write_bytes(data[: start + 20] + bytes(end - start - 20) + data[end:])
    elif how == "end never written":  # the last two records' pages still the runway's zeros
        start = spans[2][0]
        segment.write_bytes(data[:start] + bytes(len(data) - start))
    else:  # "first record damaged": the batch's first header's page lost, the rest written
        start = frame_spans(data)[-len(TORN) - len(WHOLE)][0]
        segment.write_bytes(data[:start] + bytes(HEADER.size) + data[start + HEADER.size :])


def batch_starts(data: bytes) -> list[bool]:
    """Whether each frame of a segment opens a write batch."""
    return [bool(HEADER.unpack_from(data, at)[0] & FLAG_BATCH_START) for at, _ in frame_spans(data)]


async def write_last_batch(store: FileStore) -> None:
    """The two requests of the last batch, queued in one loop step: one write."""
    whole = store.append_soon([op(seq) for seq in WHOLE])
    torn = store.append_soon([op(seq) for seq in TORN])
    await asyncio.gather(whole, torn)


@pytest.mark.parametrize(
    "history_has_batch", [True, False], ids=["history-ahead", "history-behind"]
)
@pytest.mark.parametrize(
    "how", ["cut mid-record", "middle record damaged", "end never written", "first record damaged"]
)
async def test_a_torn_request_keeps_none_of_its_records(
    tmp_path: Path, how: str, history_has_batch: bool
) -> None:
    """A request is applied whole or not at all, and is not answered before its
    write is durable: a torn one is kept whole or not at all, in the log and in
    the history; the whole request before it in its write batch is kept.
    ``history_has_batch``: the history files hold the torn batch (as a damaged
    batch that had been written whole leaves them) or not (as a crash during
    the log's write does: the history is written after it)."""
    data_dir = tmp_path / "d"
    store = FileStore(data_dir)
    await store.open()
    await store.append([op(1), op(2)])
    await store.append([op(3), op(4), op(5)])
    if not history_has_batch:
        await store.close()
        shutil.copytree(data_dir / "history", tmp_path / "history-before")
        store = FileStore(data_dir)  # (the last batch then has a segment of its own)
        await store.open()
    await write_last_batch(store)
    await store.close()
    if not history_has_batch:
        shutil.rmtree(data_dir / "history")
        shutil.copytree(tmp_path / "history-before", data_dir / "history")
    segment = Path([p for p in store.log_segments if os.path.getsize(p)][-1])
    assert batch_starts(segment.read_bytes())[-len(TORN) - len(WHOLE) :] == [
        True,
        *[False] * (len(TORN) + len(WHOLE) - 1),
    ]  # both requests in one write
    tear(segment, how)
    kept = KEPT if how == "first record damaged" else [*KEPT, *WHOLE]
    after = kept[-1] + 1

    again = FileStore(data_dir)
    recovered = await again.open()
    assert [(lsn, r["seq"]) for lsn, r in recovered.records.after(0)] == [(s, s) for s in kept]
    # (A read-only look: the open store left no torn tail for this open to cut.)
    on_disk = HistoryFiles(str(data_dir / "history")).open()
    assert max(s.tag for s in on_disk) == kept[-1]
    loaded = await again.load("n", "gc:a")
    assert loaded is not None and seqs(loaded[1]) == kept
    assert again.holds("n", "gc:a", "e1", kept[-1])
    page, _ = await again.history("n", "gc:a", "e1", kept[-1], None, 100)
    assert seqs(page) == kept[::-1]
    # The log goes on right after the last record kept; the next start sees
    # that record, and nothing of the torn request, in the log and the history.
    await again.append([op(after, client_id=99)])
    await again.close()
    third = FileStore(data_dir)
    recovered = await third.open()
    assert [(lsn, r["seq"]) for lsn, r in recovered.records.after(0)] == [
        (s, s) for s in [*kept, after]
    ]
    loaded = await third.load("n", "gc:a")
    assert loaded is not None and seqs(loaded[1]) == [*kept, after]
    assert loaded[1][-1]["client_id"] == 99
    page, _ = await third.history("n", "gc:a", "e1", after, None, 100)
    assert seqs(page) == [after, *kept[::-1]] and page[0]["client_id"] == 99
    await third.close()


EARLIER_LENGTH_MASK = (1 << 31) - 1
"""How every version before the mark read a record's length: the length word
but its top bit (FLAG_BATCH_START)."""


async def test_a_decoder_that_knows_nothing_of_the_mark_reads_the_log_record_for_record(
    tmp_path: Path,
) -> None:
    """An earlier version must read what this one writes (a downgrade): every
    length word carries no bit but FLAG_BATCH_START, and every body decodes
    with plain msgpack to the record appended. The mark shows only in the
    bodies of records followed by more of their request; a request of one
    record is written as msgpack packs it."""
    store = FileStore(tmp_path / "d")
    await store.open()
    requests = [[op(1)], [op(2), op(3), op(4)], [op(5)]]
    for request in requests:
        await store.append(request)
    queued = [store.append_soon([op(6), op(7)]), store.append_soon([op(8)])]  # one write
    await asyncio.gather(*queued)
    requests += [[op(6), op(7)], [op(8)]]
    # The history's index took its positions from the marked frames: it reads them.
    page, _ = await store.history("n", "gc:a", "e1", 8, None, 100)
    assert page == [op(seq) for seq in range(8, 0, -1)]
    await store.close()
    (segment,) = [p for p in store.log_segments if os.path.getsize(p)]
    data = Path(segment).read_bytes()
    records = [record for request in requests for record in request]
    last_of_request = {request[-1]["seq"] for request in requests}
    off = 0
    for lsn, record in enumerate(records, 1):
        word, crc, tag = HEADER.unpack_from(data, off)
        assert word & ~FLAG_BATCH_START & ~EARLIER_LENGTH_MASK == 0
        assert word & ~FLAG_BATCH_START < 1 << 30, "a bit an earlier version takes for length"
        end = off + HEADER.size + (word & EARLIER_LENGTH_MASK)
        body = data[off + HEADER.size : end]
        assert tag == lsn
        assert zlib.crc32(body, zlib.crc32(data[off : off + 4] + data[off + 8 : off + 16])) == crc
        assert msgpack.unpackb(body, raw=False) == record
        if record["seq"] in last_of_request:
            assert body == msgpack.packb(record, use_bin_type=True)
        else:
            assert body[0] == 0xDF
        off = end
    assert off == len(data)


async def test_damage_followed_by_a_later_batch_refuses(tmp_path: Path) -> None:
    data = await write_log(tmp_path / "orig", [2, 10, 1])
    spans = frame_spans(data)
    start, end = spans[5]  # inside the middle batch; the last batch follows it
    damaged = data[:start] + b"\0" * (end - start) + data[end:]
    plant(tmp_path / "d", damaged)
    with pytest.raises(StoreCorruptError, match=f"offset {start}"):
        await FileStore(tmp_path / "d").open()


async def test_damage_in_a_segment_before_the_last_refuses(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "d", segment_bytes=300)
    await store.open()
    for i in range(1, 21):
        await store.append([op(i)])
    await store.close()
    segments = [p for p in store.log_segments if os.path.getsize(p)]
    assert len(segments) >= 3
    victim = Path(segments[1])
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF  # even its very last byte: only the last segment may be torn
    victim.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptError, match=str(victim)):
        await FileStore(tmp_path / "d").open()


async def test_a_missing_segment_refuses(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "d", segment_bytes=300)
    await store.open()
    for i in range(1, 21):
        await store.append([op(i)])
    await store.close()
    segments = [p for p in store.log_segments if os.path.getsize(p)]
    os.unlink(segments[1])
    with pytest.raises(StoreCorruptError, match="missing"):
        await FileStore(tmp_path / "d").open()


async def test_a_log_that_lost_its_beginning_refuses(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "d", segment_bytes=300)
    await store.open()
    for i in range(1, 21):
        await store.append([op(i)])
    await store.close()
    os.unlink(store.log_segments[0])
    with pytest.raises(StoreCorruptError, match="no snapshot covers"):
        await FileStore(tmp_path / "d").open()


async def test_second_store_on_the_same_dir_is_refused(
    make_store: MakeStore, tmp_path: Path
) -> None:
    first, _ = await make_store()
    with pytest.raises(StoreLockedError) as err:
        await FileStore(tmp_path / "data").open()
    assert str(tmp_path / "data") in str(err.value)
    assert f"process {os.getpid()}" in str(err.value)
    await first.append([op(1)])  # the refusal did not disturb the owner
    await first.close()
    second, recovered = await make_store()
    assert seqs(recovered.records) == [1]


async def test_second_process_on_the_same_dir_fails_cleanly(
    make_store: MakeStore, tmp_path: Path
) -> None:
    await make_store()
    script = textwrap.dedent(
        f"""
        import asyncio
        from syncd.store.embedded.store import FileStore
        asyncio.run(FileStore({str(tmp_path / "data")!r}).open())
        """
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).parents[2],
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode != 0
    message = stderr.decode()
    assert "StoreLockedError" in message and str(tmp_path / "data") in message


async def test_temporary_files_left_by_a_crash_are_removed(
    make_store: MakeStore, tmp_path: Path
) -> None:
    store, _ = await make_store()
    await store.append([op(1)])
    await store.close()
    leftover = tmp_path / "data" / "snapshots" / "snapshot-00000000000000000001.snap.tmp"
    leftover.write_bytes(b"half a snapshot")
    (tmp_path / "data" / "log" / ".probe").write_bytes(b"x")
    _, recovered = await make_store()
    assert seqs(recovered.records) == [1]
    assert not leftover.exists()
