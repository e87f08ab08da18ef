"""A start from a key directory table older than a history compaction.

A clean stop writes the table; the server then runs with few CRDTs (fewer
than FLUSH_LIVES change, so no new table is written), retention trims a
CRDT's history up to a newer checkpoint and compaction deletes the segments
of the ops it dropped. The table still holds that CRDT's old row (up to the
seq it had at the stop), and the frames after the table's end begin at the
checkpoint. Killed then (SIGKILL), the next start read the row, took the
checkpoint as one more checkpoint of that life and the next op for a gap
after the row's last op: the CRDT's ops went into a life with no base, and
every read of it, its current state too, answered 410 history_expired,
though retention had dropped nothing it promised.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from syncd.crdt.engine import Engine
from syncd.store.embedded.hint import HINT_NAME
from syncd.store.embedded.store import FileStore
from syncd.store.history_index import Retention

NS = "n"
SEGMENT_BYTES = 4096
"""History segments this small: a few hundred ops make many compactions."""
RETAINED = 3

_WRITE_THEN_DIE = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from syncd.crdt.engine import Engine
    from syncd.store.embedded.store import FileStore
    from syncd.store.history_index import Retention

    async def main():
        store = FileStore(
            sys.argv[1],
            history_segment_bytes=int(sys.argv[2]),
            history_retention=Retention.parse(sys.argv[3]),
        )
        await store.open()
        engine = Engine()
        store.set_snapshot_source(lambda: (), engine.export_one)
        loaded = await store.load("n", "gc:a")
        engine.load("n", "gc:a", *loaded)
        for _ in range(int(sys.argv[4])):
            plan = engine.plan("n", "gc:a", {"op": "increment"})
            await store.commit("n", "gc:a", lambda: engine.apply(plan, 1))
        await store.compact_history()
        os.kill(os.getpid(), signal.SIGKILL)  # no clean stop: no new table

    asyncio.run(main())
    """
)


async def _write(store: FileStore, engine: Engine, crdt_id: str, n: int) -> None:
    for _ in range(n):
        plan = engine.plan(NS, crdt_id, {"op": "increment"})
        await store.commit(NS, crdt_id, lambda plan=plan: engine.apply(plan, 1))


def _open(data: Path) -> FileStore:
    return FileStore(
        data,
        history_segment_bytes=SEGMENT_BYTES,
        history_retention=Retention.parse(f"{RETAINED}ops"),
    )


async def test_a_start_from_a_table_older_than_a_compaction_keeps_the_crdt_readable(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    store = _open(data)
    await store.open()
    engine = Engine()
    store.set_snapshot_source(lambda: (), engine.export_one)
    await _write(store, engine, "gc:a", 10)
    # Never written again: its ops keep the segment where the table ends
    # (the start would not use a table whose end lies in a deleted segment).
    await _write(store, engine, "gc:b", 60)
    await store.close()  # the table: gc:a up to seq 10
    assert (data / "history" / HINT_NAME).exists()

    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _WRITE_THEN_DIE,
            str(data),
            str(SEGMENT_BYTES),
            f"{RETAINED}ops",
            "400",
        ],
        cwd=root,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()

    store = _open(data)
    await store.open()
    try:
        assert store._history.hint_lives == 2, "the start read the old table"
        loaded = await store.load(NS, "gc:a")  # was 410 history_expired
        assert loaded is not None
        fresh = Engine()
        fresh.load(NS, "gc:a", *loaded)
        read = fresh.read(NS, "gc:a")
        assert read is not None and (read["value"], read["seq"]) == (410, 410)
        life = store._history.index.get(NS, "gc:a")
        assert life is not None and life.oldest is not None
        assert life.oldest <= 410 - RETAINED, "the state retention promises can be rebuilt"
        epoch = fresh.get(NS, "gc:a")
        assert epoch is not None
        for seq in range(410 - RETAINED, 411):
            await store.history_base(NS, "gc:a", epoch.epoch, 410, seq)
    finally:
        await store.close()
