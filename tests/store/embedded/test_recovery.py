"""Recovery: torn tails are cut, damage a crash cannot explain refuses to start,
the data directory is locked against a second store."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from syncd.store.embedded.log import HEADER, LENGTH_MASK, segment_name
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
    order: good records after the damage, within that batch, are cut too."""
    data = await write_log(tmp_path / "orig", [2, 10])
    spans = frame_spans(data)
    start, end = spans[5]  # the 4th record of the last batch
    damaged = data[:start] + b"\0" * (end - start) + data[end:]
    plant(tmp_path / "d", damaged)
    store = FileStore(tmp_path / "d")
    recovered = await store.open()
    assert seqs(recovered.records) == [1, 2, 3, 4, 5]
    await store.close()


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
