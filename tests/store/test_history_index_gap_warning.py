"""A gap in a CRDT's ops while the server runs is logged, once per CRDT.

Every op reaches the history index in seq order, so a gap outside a start
(or a re-read after a failure), where records lost with a damaged file are
expected, is a bug: the index starts a new life there and reads of the
states before it answer 410 as if retention had dropped them. The warning
names the CRDT, its life and the seqs, so such a 410 can be traced."""

from __future__ import annotations

import logging
from pathlib import Path

import msgpack
import pytest

from syncd.store.base import Record
from syncd.store.embedded.history import FileStoreHistory, Written
from syncd.store.embedded.log import frame
from syncd.store.history_index import GAP_WARNINGS_KEPT, HistoryIndex, Retention

NS = "n"


def gap_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "follows seq" in r.getMessage()]


def test_a_gap_while_running_is_logged_once_per_crdt_with_its_seqs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="syncd.store")
    index = HistoryIndex()
    for seq in (1, 2, 3):
        index.add_op(NS, "gc:a", "e1", seq, 0, seq * 100, 50)
    index.add_op(NS, "gc:a", "e1", 6, 0, 600, 50)  # 4 and 5 never came
    index.add_op(NS, "gc:a", "e1", 9, 0, 900, 50)  # again: not logged again
    (line,) = gap_lines(caplog)
    assert "n/gc:a" in line and "life e1" in line
    assert "op 6 follows seq 3" in line and "held from 1" in line
    index.add_op(NS, "gc:b", "e1", 1, 0, 1000, 50)
    index.add_op(NS, "gc:b", "e1", 3, 0, 1100, 50)
    assert len(gap_lines(caplog)) == 2, "another CRDT's gap is logged too"


def test_the_next_op_a_copy_or_a_new_life_is_no_gap(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="syncd.store")
    index = HistoryIndex()
    index.add_op(NS, "gc:a", "e1", 1, 0, 100, 50)
    index.add_op(NS, "gc:a", "e1", 2, 0, 200, 50)
    index.add_op(NS, "gc:a", "e1", 2, 0, 300, 50)  # a copy read back
    index.add_op(NS, "gc:a", "e2", 1, 0, 400, 50)  # deleted and created again
    index.add_checkpoint(NS, "gc:a", "e2", 1, 500, 50)  # a checkpoint at the last op
    index.add_op(NS, "gc:a", "e2", 2, 0, 600, 50)
    assert gap_lines(caplog) == []


def test_gaps_remembered_are_bounded(caplog: pytest.LogCaptureFixture) -> None:
    """Past GAP_WARNINGS_KEPT CRDTs the oldest is forgotten (and would be
    logged again): a bug that makes a gap at every op costs bounded memory."""
    caplog.set_level(logging.WARNING, logger="syncd.store")
    index = HistoryIndex()
    for i in range(GAP_WARNINGS_KEPT + 1):
        index.add_op(NS, f"gc:{i}", "e", 1, 0, 0, 10)
        index.add_op(NS, f"gc:{i}", "e", 3, 0, 0, 10)
    assert len(index._gaps_logged) == GAP_WARNINGS_KEPT
    index.add_op(NS, "gc:0", "e", 5, 0, 0, 10)
    assert len(gap_lines(caplog)) == GAP_WARNINGS_KEPT + 2


def _op(seq: int, lsn: int) -> Written:
    record: Record = {"kind": "op", "ns": NS, "id": "gc:a", "epoch": "e1", "seq": seq, "ts": 1}
    record["op"] = {"op": "increment"}
    return frame(lsn, msgpack.packb(record)), record, lsn


def test_a_start_that_meets_a_gap_on_disk_does_not_log_it_but_a_later_one_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A start reads the log's records into the history (load): a gap there
    is records lost with a damaged file, expected and reported elsewhere.
    The same gap in a batch written while running is logged."""
    caplog.set_level(logging.WARNING, logger="syncd.store")
    history = FileStoreHistory(str(tmp_path / "h"), Retention.parse("1000ops"), lambda: 0, 1 << 20)
    main = [(lsn, _op(seq, lsn)[1]) for lsn, seq in ((1, 1), (2, 2), (3, 5))]
    history.load([], lambda after: [(lsn, r) for lsn, r in main if lsn > after], 3)
    life = history.index.get(NS, "gc:a")
    assert life is not None and list(life.seqs) == [5], "the gap did start a new life"
    assert gap_lines(caplog) == []
    assert not history.index.recovering
    history.indexed(history.files.end(), [_op(6, 4), _op(9, 5)])
    (line,) = gap_lines(caplog)
    assert "op 9 follows seq 6" in line
    history.files.close()
    history.index.close()


def test_a_checkpoint_past_every_op_held_is_the_base_of_a_new_life(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A checkpoint newer than the ops held (a start's table row older than
    the frames after it, see embedded/test_hint_behind_compaction.py) starts
    the life afresh with it as base: the op after it is no gap, and the
    state at the checkpoint and after can be rebuilt."""
    caplog.set_level(logging.WARNING, logger="syncd.store")
    index = HistoryIndex()
    index.recovering = True
    for seq in (1, 2, 3):
        index.add_op(NS, "gc:a", "e1", seq, 0, seq * 100, 50)
    index.add_checkpoint(NS, "gc:a", "e1", 200, 20_000, 50)
    index.add_op(NS, "gc:a", "e1", 201, 0, 20_100, 50)
    life = index.get(NS, "gc:a")
    assert life is not None
    assert (life.oldest, life.latest, list(life.seqs)) == (200, 201, [201])
    assert index.base(NS, "gc:a", "e1", 201, 200) == (20_000, [])
    assert index.base(NS, "gc:a", "e1", 201, 201) == (20_000, [20_100])
    assert index.holds(NS, "gc:a", "e1", 201)
    assert gap_lines(caplog) == [], "during a start: expected, not logged"
    index.recovering = False
    index.add_checkpoint(NS, "gc:a", "e1", 300, 30_000, 50)
    (line,) = gap_lines(caplog)
    assert "checkpoint 300 follows seq 201" in line
