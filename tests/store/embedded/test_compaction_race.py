"""A history compaction counts the positions the index needs per segment,
then reads the key directory's table (in a thread: it takes a while at many
CRDTs) and deletes the sealed segments nothing points into. Appends go on
meanwhile: the segments they fill and seal during the read held frames the
count had not seen, and were deleted as empty with every op in them (found
by a SIGKILL harness: a counter unloadable, 410, with two empty history
segments re-created by reads of their deleted frames)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from syncd.store.embedded.store import FileStore
from tests.store.embedded.test_hint import NS, Writer

OPTIONS = {"history_segment_bytes": 1024}


async def test_segments_sealed_while_compaction_reads_the_table_are_kept(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = FileStore(data, **OPTIONS)  # type: ignore[arg-type]
    await store.open()
    writer = Writer(store)
    for i in range(20):
        await writer.op(f"gc:{i % 4}", {"op": "increment"})
    await store.close()  # a table: the compaction reads it

    store = FileStore(data, **OPTIONS)  # type: ignore[arg-type]
    await store.open()
    try:
        assert store._history.index.table is not None
        writer = Writer(store)
        for i in range(4):  # loaded now: reads wait for a running compaction
            await writer.op(f"gc:{i}", {"op": "increment"})
        loop = asyncio.get_running_loop()
        assert store._snap_io is not None
        before, reading = threading.Event(), threading.Event()
        # The compaction's thread runs in order: this holds it before the
        # compaction counts (its first call, the table's removal, waits)...
        held = [store._snap_io.run(loop, before.wait)]
        compaction = asyncio.create_task(store.compact_history())
        try:
            async with asyncio.timeout(10):
                for _ in range(5):
                    await asyncio.sleep(0)
                # ...and this while it reads the table (its next call, queued
                # once it has counted).
                held.append(store._snap_io.run(loop, reading.wait))
                before.set()
                while store._history.index._compaction is None:  # counted, reading the table
                    await asyncio.sleep(0.001)
                sealed = store._history.files.segment_count
                for i in range(36):  # several segments filled and sealed meanwhile
                    await writer.op(f"gc:{i % 4}", {"op": "increment"})
                assert store._history.files.segment_count > sealed + 2
        finally:
            before.set()
            reading.set()
        await asyncio.gather(*held)
        await compaction
        expected = {"gc:0": 15, "gc:1": 15, "gc:2": 15, "gc:3": 15}
        assert {c: await writer.value(c) for c in expected} == {
            c: (n, n) for c, n in expected.items()
        }
        for crdt_id, n in expected.items():
            life = store._history.index.get(NS, crdt_id)
            assert life is not None
            ops, _ = await store.history(NS, crdt_id, life.epoch, n, None, 100)
            assert [o["seq"] for o in ops] == list(range(n, 0, -1))
    finally:
        await store.close()
