"""The history files at open: the frames past the main log's last record are cut,
and the copies history compaction left after them are kept."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest

from syncd.store.embedded.history_files import HistoryFiles
from syncd.store.embedded.log import MAX_RECORD_BYTES, frame
from tests.store.support import op

SEGMENT_BYTES = 400
"""About three op frames a segment: the frames cut span several segments."""

LOG_LAST = 6
"""The main log's last record: the history's frames tagged 7 and on were lost."""


def op_frame(tag: int) -> bytes:
    return frame(tag, msgpack.packb(op(tag), use_bin_type=True))


def append(files: HistoryFiles, frames: list[bytes]) -> None:
    """Each frame as the flusher writes a batch (plan, then write)."""
    for data in frames:
        files.write(files.plan(len(data), 1), data)


def tags_on_disk(directory: Path) -> list[int]:
    """Every frame's tag, in position order, as a fresh open reads them."""
    files = HistoryFiles(str(directory), SEGMENT_BYTES)
    found = files.open()
    files.close()
    return [s.tag for s in found]


def lost_history(directory: Path) -> None:
    """Frames 1..6, then 7..12 (which the log lost), with compaction's copies of
    frames 2 and 4 (whose originals it may have deleted) among them."""
    files = HistoryFiles(str(directory), SEGMENT_BYTES)
    files.open()
    frames = [op_frame(tag) for tag in range(1, 13)]
    append(files, frames[:6])
    append(files, [frames[6], frames[7], frames[1], frames[8], frames[3], *frames[9:]])
    files.close()


def test_frames_past_the_logs_last_record_are_cut_and_later_copies_kept(tmp_path: Path) -> None:
    lost_history(tmp_path)
    assert len(list(tmp_path.glob("*.hist"))) > 3
    files = HistoryFiles(str(tmp_path), SEGMENT_BYTES)
    found = files.open(None, LOG_LAST)
    assert [s.tag for s in found] == [1, 2, 3, 4, 5, 6, 2, 4]
    assert [r["seq"] for r in files.read([s.pos for s in found])] == [1, 2, 3, 4, 5, 6, 2, 4]
    # The next frames go after them; a later start reads the same.
    append(files, [op_frame(7)])
    files.close()
    assert tags_on_disk(tmp_path) == [1, 2, 3, 4, 5, 6, 2, 4, 7]


def test_a_crash_part_way_through_the_cut_is_cut_again_at_the_next_open(
    tmp_path: Path,
) -> None:
    """The copies were written to a new segment, but the frames past the log
    were not cut yet: the next open cuts them and keeps the copies (twice over,
    which the index takes as one, as any copies)."""
    lost_history(tmp_path)
    files = HistoryFiles(str(tmp_path), SEGMENT_BYTES)
    numbers = files.numbers()
    files._write_new(numbers[-1] + 1, op_frame(2) + op_frame(4))  # what _cut writes first
    found = files.open(None, LOG_LAST)
    files.close()
    assert [s.tag for s in found] == [1, 2, 3, 4, 5, 6, 2, 4, 2, 4]
    assert tags_on_disk(tmp_path) == [1, 2, 3, 4, 5, 6, 2, 4, 2, 4]


def test_nothing_is_cut_when_the_history_is_behind_the_log(tmp_path: Path) -> None:
    lost_history(tmp_path)
    files = HistoryFiles(str(tmp_path), SEGMENT_BYTES)
    found = files.open(None, 12)
    files.close()
    assert [s.tag for s in found] == [1, 2, 3, 4, 5, 6, 7, 8, 2, 9, 4, 10, 11, 12]


def test_a_checkpoint_past_the_op_record_bound_is_read_with_the_frames_after_it(
    tmp_path: Path,
) -> None:
    """A checkpoint is a whole CRDT's entry: one of a CRDT near the 64 MiB state
    bound is longer than any op record may be. The scan reads it, and the frames
    after it, instead of cutting them as a torn tail."""
    big = frame(
        2, msgpack.packb({"kind": "checkpoint", "entry": {"state": b"x" * (MAX_RECORD_BYTES + 1)}})
    )
    files = HistoryFiles(str(tmp_path), SEGMENT_BYTES)
    files.open()
    append(files, [op_frame(1), big, op_frame(3)])
    files.close()
    assert tags_on_disk(tmp_path) == [1, 2, 3]
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) > MAX_RECORD_BYTES


def test_a_read_of_a_segment_that_is_gone_raises_and_creates_nothing(tmp_path: Path) -> None:
    files = HistoryFiles(str(tmp_path), SEGMENT_BYTES)
    files.open()
    append(files, [op_frame(tag) for tag in range(1, 7)])
    files.close()
    segments = sorted(tmp_path.glob("*.hist"))
    files = HistoryFiles(str(tmp_path), SEGMENT_BYTES)
    found = files.open()
    first = found[0].pos
    segments[0].unlink()  # as compaction deletes a segment a stale position points into
    try:
        with pytest.raises(FileNotFoundError):
            files.read([first])
        with pytest.raises(FileNotFoundError):
            list(files.read_frames([first]))
    finally:
        files.close()
    # Reads used to open it with O_CREAT: an empty segment a later start would scan.
    assert not segments[0].exists()
