"""A crash of the machine loses what was not fsynced, in any order: the
history files are fsynced only before the log forgets records (and before a
key directory table names them), so it may keep a later history segment's
pages and lose the end of the one before. The log, fsynced per batch, holds
those records: a start appends them again, and every acknowledged op is read
back."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from syncd.store.embedded.hint import HINT_NAME
from syncd.store.embedded.history_files import split
from syncd.store.embedded.log import HEADER, LENGTH_MASK
from syncd.store.embedded.store import FileStore
from syncd.store.history_index import Retention
from tests.store.embedded.test_hint import Writer

ROOT = Path(__file__).resolve().parents[3]

_WRITE_THEN_DIE = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from syncd.store.embedded.store import FileStore
    from tests.store.embedded.test_hint import Writer

    async def main():
        store = FileStore(sys.argv[1], history_segment_bytes=2048)
        await store.open()
        writer = Writer(store)
        for i in range(40):
            await writer.op(f"gc:{i % 3}", {"op": "increment"})
            print(f"gc:{i % 3}", flush=True)  # acknowledged
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main())
    """
)


def frame_starts(path: Path) -> list[int]:
    data = path.read_bytes()
    starts, off = [], 0
    while off < len(data):
        starts.append(off)
        off += HEADER.size + (HEADER.unpack_from(data, off)[0] & LENGTH_MASK)
    return starts


async def test_a_history_segment_that_lost_its_end_before_a_later_one_is_refilled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    proc = subprocess.run(
        [sys.executable, "-c", _WRITE_THEN_DIE, str(data)],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    acked: dict[str, int] = {}
    for line in proc.stdout.decode().split():
        acked[line] = acked.get(line, 0) + 1
    assert sum(acked.values()) == 40
    history = data / "history"
    segments = sorted(history.glob("*.hist"))
    assert len(segments) >= 3 and not (history / HINT_NAME).exists()
    # The machine went down with the last two frames of the segment before
    # the last one unwritten, and the last one's pages on disk.
    os.truncate(segments[-2], frame_starts(segments[-2])[-2])

    caplog.set_level(logging.WARNING, logger="syncd.store")
    for start in range(2):
        store = FileStore(data, history_segment_bytes=2048)
        await store.open()
        try:
            writer = Writer(store)
            for crdt_id, count in acked.items():
                assert await writer.value(crdt_id) == (count, count), (start, crdt_id)
                ops, _ = await store.history("n", crdt_id, *_life(store, crdt_id), None, 100)
                assert [o["seq"] for o in ops] == list(range(count, 0, -1))
        finally:
            await store.close()
        os.unlink(history / HINT_NAME)  # the second start reads the segments again
    refills = [r for r in caplog.records if "appended again from the log" in r.getMessage()]
    assert len(refills) == 1  # the first start's: the second finds them appended
    assert "2 records" in refills[0].getMessage()


def _life(store: FileStore, crdt_id: str) -> tuple[str, int]:
    life = store._history.index.get("n", crdt_id)
    assert life is not None
    return life.epoch, life.latest


async def test_a_compaction_makes_the_history_durable_before_it_deletes_segments(
    tmp_path: Path,
) -> None:
    """Retention trims a CRDT's ops up to its newest checkpoint, and compaction
    deletes the segments that held them: that checkpoint (and the ops after
    it) must be on disk first, or a crash of the machine right after leaves
    the CRDT with no base at all (410 for good). Every history file is
    synced when compaction deletes a segment (nothing is left to sync)."""
    store = FileStore(
        tmp_path / "data", history_segment_bytes=1024, history_retention=Retention.parse("5ops")
    )
    await store.open()
    try:
        writer = Writer(store)
        # No automatic compaction meanwhile: the log grows slower than that.
        store._history._grown = -(1 << 40)
        for _ in range(300):  # past the first checkpoint (every ~16 KiB of ops)
            await writer.op("gc:x", {"op": "increment"})
        files = store._history.files
        assert files._dirty  # written since the last sync
        assert await store.compact_history() > 0
        assert not files._dirty
    finally:
        await store.close()


async def test_a_table_names_no_op_indexed_after_its_plan(tmp_path: Path) -> None:
    """A key directory table is planned on the loop (its ``end``: every frame
    before it is indexed) and written in a thread, from the live lives, which
    the loop goes on appending to. A row that also named the ops indexed
    meanwhile pointed past ``end``, at frames no sync had made durable: a
    crash of the machine lost them, the start appended them again from the
    log elsewhere (a request's records are shorter there, without the mark),
    and the row still pointed at the old place (a damaged record, 503)."""
    data = tmp_path / "data"
    store = FileStore(data, index_flush_crdts=1 << 20)
    await store.open()
    writer = Writer(store)
    for _ in range(3):
        await writer.op("gc:x", {"op": "increment"})
    history = store._history
    plan = history._index_plan()  # as start_index_flush takes it, on the loop
    _, end = split(plan.header.end)
    # Indexed after the plan: a request of three ops (its first two records
    # marked as followed by more), then an op of gc:x.
    await writer.op("gc:y", [{"op": "increment"}] * 3)
    await writer.op("gc:x", {"op": "increment"})
    history.index.flushed(history._write_table(plan))
    store._release()  # the machine goes down: nothing after the table's end was synced
    (segment,) = (data / "history").glob("*.hist")
    assert segment.stat().st_size > end
    os.truncate(segment, end)

    store = FileStore(data)
    await store.open()
    try:
        writer = Writer(store)
        assert store._history.hint_lives == 1
        assert await writer.value("gc:x") == (4, 4)
        assert await writer.value("gc:y") == (3, 3)
        life = store._history.index.get("n", "gc:x")
        assert life is not None
        ops, _ = await store.history("n", "gc:x", life.epoch, 4, None, 10)
        assert [o["seq"] for o in ops] == [4, 3, 2, 1]
    finally:
        await store.close()


_SNAPSHOT_THEN_DIE = textwrap.dedent(
    """
    import asyncio, json, os, signal, sys
    from syncd.store.embedded import compaction, history_files
    from syncd.store.embedded.store import FileStore
    from tests.store.embedded.test_hint import Writer

    real_sync = history_files.HistoryFiles.sync

    def sync(self):
        sizes = dict(self._sizes)
        real_sync(self)
        print("synced", json.dumps(sizes), flush=True)  # on disk for good

    history_files.HistoryFiles.sync = sync

    def die(self, covered):
        os.kill(os.getpid(), signal.SIGKILL)  # published; the log not cut yet

    compaction.Compaction._compact_sync = die

    async def main():
        store = FileStore(sys.argv[1])
        await store.open()
        writer = Writer(store)
        for _ in range(20):
            await writer.op("gc:x", {"op": "increment"})
            print("acked", flush=True)
        await store.compact_now()

    asyncio.run(main())
    """
)


async def test_the_history_holds_what_a_snapshot_covers_before_it_is_published(
    tmp_path: Path,
) -> None:
    """A start reads the log after the newest snapshot only, and appends to the
    history what the log holds past the history's end. The snapshot was
    published before the history was synced (right after, before the log is
    cut): a crash of the machine in between lost the history's unsynced
    records that the snapshot covers, and with them every acknowledged op of
    the CRDTs in them (the server's snapshots carry no state: the history
    does). SIGKILL right after the publication, then every history byte not
    yet fsynced is dropped."""
    data = tmp_path / "data"
    proc = subprocess.run(
        [sys.executable, "-c", _SNAPSHOT_THEN_DIE, str(data)],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    lines = proc.stdout.decode().splitlines()
    assert lines.count("acked") == 20
    assert list((data / "snapshots").glob("*.snap"))  # published
    synced: dict[str, int] = {}
    for line in lines:
        if line.startswith("synced "):
            synced.update(json.loads(line.removeprefix("synced ")))
    for segment in (data / "history").glob("*.hist"):
        os.truncate(segment, synced.get(str(int(segment.name[:20])), 0))

    store = FileStore(data)
    await store.open()
    try:
        assert await Writer(store).value("gc:x") == (20, 20)
    finally:
        await store.close()
