"""Segment framing and scanning, below the store: what survives any cut or damage."""

from __future__ import annotations

import os
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from syncd.store.base import Record
from syncd.store.embedded.log import (
    FLAG_BATCH_START,
    HEADER,
    HEADER_SIZE,
    MARK_MORE,
    MAX_RECORD_BYTES,
    LogFile,
    LogWriter,
    RecordChunk,
    StoreCorruptError,
    check_segment,
    decode_chunk,
    decode_map,
    frame,
    mark_more,
    scan_segment,
)
from tests.store.support import op

MAX_EXAMPLES = int(os.environ.get("SYNCD_HYPOTHESIS_EXAMPLES", "150"))


def body(i: int) -> bytes:
    return msgpack.packb(op(i), use_bin_type=True)


def request_frames(first_lsn: int, size: int, *, marked: bool = True) -> list[bytes]:
    """The frames of one request of ``size`` records, as the store writes them:
    each but the last marked (``marked=False``: as before the mark existed)."""
    frames = []
    for lsn in range(first_lsn, first_lsn + size):
        more = marked and lsn < first_lsn + size - 1
        frames.append(frame(lsn, mark_more(body(lsn)) if more else body(lsn)))
    return frames


def write_requests(path: Path, batches: list[list[int]], *, marked: bool = True) -> list[int]:
    """Write batches of requests (the record count of each) the way the store
    does; the end offset of every record."""
    writer = LogWriter(str(path.parent), LogFile.open, 1 << 30, [(1, str(path))])
    writer.active = LogFile.open(str(path))  # what repair() does, minus its fsyncs
    ends = []
    lsn = 1
    offset = 0
    for requests in batches:
        frames = []
        for size in requests:
            frames += request_frames(lsn + len(frames), size, marked=marked)
        frames[0] = frame(lsn, frames[0][HEADER_SIZE:], FLAG_BATCH_START)
        for data in frames:
            offset += len(data)
            ends.append(offset)
        writer.write(b"".join(frames), lsn, sync=False)
        lsn += len(frames)
    writer.close()
    return ends


def write_batches(path: Path, batches: list[int], *, marked: bool = True) -> list[int]:
    """``write_requests`` of one request a batch, of ``batches`` records each."""
    return write_requests(path, [[size] for size in batches], marked=marked)


def scan(path: Path, *, tolerate_tail: bool = True) -> tuple[list[tuple[int, Record]], int]:
    out: list[tuple[int, Record]] = []
    result = scan_segment(str(path), 1, 0, out, limit=None, tolerate_tail=tolerate_tail)
    return out, result.good_end


def test_frame_layout() -> None:
    data = frame(42, b"\x81\xa1k\x01", FLAG_BATCH_START)
    word, _, tag = HEADER.unpack_from(data)
    assert HEADER_SIZE == 16 and len(data) == 20
    assert word == 4 | FLAG_BATCH_START and tag == 42


def test_decode_map_refuses_what_is_not_one_map() -> None:
    assert decode_map(msgpack.packb({"a": 1})) == {"a": 1}
    assert decode_map(msgpack.packb([1])) is None
    assert decode_map(msgpack.packb({"a": 1}) + b"\x01") is None  # trailing bytes
    assert decode_map(b"\xc1") is None  # never-used msgpack byte
    assert decode_map(b"\xdf\xff\xff\xff\xff") is None  # a map claiming 4G entries


def test_scan_reads_every_record(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    ends = write_batches(path, [1, 3, 2])
    records, good = scan(path)
    assert [lsn for lsn, _ in records] == [1, 2, 3, 4, 5, 6]
    assert records[3][1] == op(4)
    assert good == ends[-1]


def test_skip_upto_checks_but_does_not_return_covered_records(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    write_batches(path, [3, 3])
    out: list[tuple[int, Record]] = []
    result = scan_segment(str(path), 1, 4, out, limit=None, tolerate_tail=False)
    assert [lsn for lsn, _ in out] == [5, 6] and result.next_lsn == 7


def test_limit_reads_only_the_durable_part(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    ends = write_batches(path, [2, 2])
    with open(path, "ab") as f:
        f.write(b"not yet durable")
    out: list[tuple[int, Record]] = []
    scan_segment(str(path), 1, 0, out, limit=ends[-1], tolerate_tail=False)
    assert len(out) == 4
    with pytest.raises(StoreCorruptError, match="were made durable"):
        scan_segment(str(path), 1, 0, [], limit=ends[-1] + 100, tolerate_tail=False)


def test_without_tolerance_any_damage_refuses(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    ends = write_batches(path, [2, 2])
    with open(path, "r+b") as f:
        f.truncate(ends[-1] - 1)
    with pytest.raises(StoreCorruptError, match=f"offset {ends[2]}"):
        scan(path, tolerate_tail=False)


def test_a_length_over_the_limit_is_damage(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    ends = write_batches(path, [1])
    huge = HEADER.pack(MAX_RECORD_BYTES + 1, 0, 2) + b"\0" * 64
    path.write_bytes(path.read_bytes() + huge)
    records, good = scan(path)
    assert len(records) == 1 and good == ends[0]


def test_a_well_framed_record_out_of_sequence_is_damage(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    ends = write_batches(path, [2])
    path.write_bytes(path.read_bytes() + frame(7, body(7), FLAG_BATCH_START))
    records, good = scan(path)
    assert len(records) == 2 and good == ends[-1]


def request_ends(batches: list[list[int]], ends: list[int]) -> list[int]:
    """The end offset of every request, from every record's."""
    out, at = [], 0
    for requests in batches:
        for size in requests:
            at += size
            out.append(ends[at - 1])
    return out


def request_starts(batches: list[list[int]], ends: list[int]) -> list[int]:
    """The offset of every request's first record, from every record's end."""
    return [0, *request_ends(batches, ends)[:-1]]


BATCHES = st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=3), min_size=1, max_size=5)
"""Batches of requests of a few records each."""


@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(batches=BATCHES, data=st.data())
def test_any_cut_keeps_exactly_the_whole_requests(
    tmp_path: Path, batches: list[list[int]], data: st.DataObject
) -> None:
    """A cut anywhere, at a record's end too, keeps no record of a request it is
    in, and every request before it, of its batch too."""
    path = tmp_path / "cut.seg"
    path.unlink(missing_ok=True)
    ends = write_requests(path, batches)
    cut = data.draw(st.integers(0, ends[-1]), label="cut")
    with open(path, "r+b") as f:
        f.truncate(cut)
    records, good = scan(path)
    whole = [end for end in request_ends(batches, ends) if end <= cut]
    kept = sum([size for requests in batches for size in requests][: len(whole)])
    assert [lsn for lsn, _ in records] == list(range(1, kept + 1))
    assert good == (whole[-1] if whole else 0)


@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(batches=BATCHES, data=st.data())
def test_a_log_from_before_the_mark_is_cut_at_the_bad_record(
    tmp_path: Path, batches: list[list[int]], data: st.DataObject
) -> None:
    """A segment written before the mark existed cannot tell where a torn
    request began: it keeps every whole record, as it did then."""
    path = tmp_path / "cut.seg"
    path.unlink(missing_ok=True)
    ends = write_requests(path, batches, marked=False)
    cut = data.draw(st.integers(0, ends[-1]), label="cut")
    with open(path, "r+b") as f:
        f.truncate(cut)
    records, good = scan(path)
    whole = [end for end in ends if end <= cut]
    assert [lsn for lsn, _ in records] == list(range(1, len(whole) + 1))
    assert good == (whole[-1] if whole else 0)


@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    batches=st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=3), min_size=2, max_size=4),
    data=st.data(),
)
def test_damage_is_cut_only_inside_the_last_batch(
    tmp_path: Path, batches: list[list[int]], data: st.DataObject
) -> None:
    path = tmp_path / "flip.seg"
    path.unlink(missing_ok=True)
    ends = write_requests(path, batches)
    last_batch_start = ends[-sum(batches[-1]) - 1]
    at = data.draw(st.integers(0, ends[-1] - 1), label="at")
    raw = bytearray(path.read_bytes())
    raw[at] ^= data.draw(st.integers(1, 255), label="xor")
    path.write_bytes(bytes(raw))
    if at >= last_batch_start:
        records, good = scan(path)
        # Nothing of the damaged request is kept, before the damage or after it;
        # every request before it is, of its batch too.
        starts = request_starts(batches, ends)
        damaged = max(i for i, start in enumerate(starts) if start <= at)
        kept = sum([size for requests in batches for size in requests][:damaged])
        assert [lsn for lsn, _ in records] == list(range(1, kept + 1))
        assert good == starts[damaged]
    else:
        with pytest.raises(StoreCorruptError, match="offset"):
            scan(path)


def test_a_batchs_first_record_damaged_keeps_the_batch_before_whole(tmp_path: Path) -> None:
    """The record before the damage ends its request (and its batch): the damage
    is the next batch's first record, and only that batch is cut."""
    path = tmp_path / "seg"
    ends = write_requests(path, [[2, 3], [4]])
    raw = bytearray(path.read_bytes())
    raw[ends[4] : ends[4] + HEADER_SIZE] = bytes(HEADER_SIZE)  # its header's page lost
    path.write_bytes(bytes(raw))
    records, good = scan(path)
    assert [lsn for lsn, _ in records] == [1, 2, 3, 4, 5] and good == ends[4]


def test_a_segment_ending_inside_a_request_refuses_without_tolerance(tmp_path: Path) -> None:
    """Its last record says more of its request follows: records are missing,
    which only the last segment at start-up may show (a torn write)."""
    path = tmp_path / "seg"
    ends = write_requests(path, [[2], [1, 3]])
    with open(path, "r+b") as f:
        f.truncate(ends[4])  # after the last request's second record, a record's end
    with pytest.raises(StoreCorruptError, match=f"offset {ends[4]} inside a request"):
        scan(path, tolerate_tail=False)
    records, good = scan(path)
    assert [lsn for lsn, _ in records] == [1, 2, 3] and good == ends[2]


@pytest.mark.parametrize(
    ("batches", "kept"),
    [([[2], [3], [9]], 5), ([[2], [3], [4, 5]], 9)],
    ids=["torn-batch-of-one-request", "request-before-it-in-its-batch"],
)
@pytest.mark.parametrize("skip_upto", [0, 3, 6])
@pytest.mark.parametrize("chunk_bytes", [1, 150, 400, 1 << 20])
def test_a_torn_request_leaves_none_of_its_records_in_the_chunks(
    tmp_path: Path, chunk_bytes: int, skip_upto: int, batches: list[list[int]], kept: int
) -> None:
    """Chunks are handed out as the scan goes, before it meets the damage: those
    holding records of the torn request are taken back or cut short, and those
    of whole requests before it kept."""
    path = tmp_path / "seg"
    ends = write_requests(path, batches)
    with open(path, "r+b") as f:
        f.truncate(ends[-2] - 5)  # inside the last request's next-to-last record
    chunks: list[RecordChunk] = []
    result = check_segment(
        str(path), 1, skip_upto, chunks, limit=None, tolerate_tail=True, chunk_bytes=chunk_bytes
    )
    assert result.next_lsn == kept + 1 and result.good_end == ends[kept - 1]
    got = [(c.first_lsn, record["seq"]) for c in chunks for record in decode_chunk(c)]
    lsns = [c.first_lsn + i for c in chunks for i in range(c.count)]
    assert lsns == list(range(skip_upto + 1, kept + 1))
    assert [seq for _, seq in got] == lsns
    for c in chunks:  # each chunk's offset is its first record's frame
        assert c.offset == (0 if c.first_lsn == 1 else ends[c.first_lsn - 2])


@pytest.mark.parametrize(
    "record",
    [op(1), {f"key{i}": i for i in range(300)}],
    ids=["fixmap", "map16"],
)
def test_the_mark_is_a_32_bit_map_header_any_decoder_reads_as_the_same_map(
    record: Record,
) -> None:
    packed = msgpack.packb(record, use_bin_type=True)
    assert packed[0] in (range(0x80, 0x90) if len(record) < 16 else (0xDE,))
    marked = mark_more(packed)
    assert marked[0] == MARK_MORE and int.from_bytes(marked[1:5], "big") == len(record)
    assert msgpack.unpackb(marked, raw=False) == record
    assert decode_map(marked) == record
    with pytest.raises(ValueError, match="not a packed map"):
        mark_more(msgpack.packb([1, 2]))


@pytest.mark.parametrize("flag", ["kernel", "refused"])
def test_write_durable_writes_at_the_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str
) -> None:
    """A group commit's one durable write: with the kernel's RWF_DSYNC, or, where
    the kernel refuses the flag, a plain write and fsync from then on."""
    import syncd.store.embedded.log as log_module

    if flag == "refused":
        # A flag no kernel knows: pwritev2 fails with EOPNOTSUPP, as an old
        # kernel does for RWF_DSYNC, before writing anything.
        monkeypatch.setattr(log_module, "_dsync_flag", 1 << 30)
    elif not log_module._dsync_flag:
        pytest.skip("this platform has no RWF_DSYNC")
    path = tmp_path / "seg"
    f = LogFile.open(str(path))
    try:
        f.write_durable(b"hello ", 0)
        f.write_durable(memoryview(b"durable world"), 6)
    finally:
        f.close()
    assert path.read_bytes() == b"hello durable world"
    if flag == "refused":
        assert log_module._dsync_flag == 0
