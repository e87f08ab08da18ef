"""A start without a usable key directory table rebuilds the index from the
history segments: every CRDT the store could load before is loaded again,
with the same state and history."""

from __future__ import annotations

import os
import random
from pathlib import Path

from syncd.store.embedded.hint import HINT_NAME
from syncd.store.embedded.store import FileStore
from syncd.store.history_index import Retention
from tests.store.embedded.test_hint import NS, Writer


async def test_a_rebuild_keeps_a_checkpoint_whose_op_compaction_deleted(tmp_path: Path) -> None:
    """Retention trims a CRDT's ops up to its checkpoint and compaction deletes
    the segments nothing points into; the trimmed ops of other segments, kept
    alive by other CRDTs' frames, stay on disk. Rebuilt from the segments (a
    SIGKILL during a compaction leaves no table: it is removed before the
    segments go), the index met those ops, no op at the checkpoint's seq,
    then the checkpoint: it took that for a gap and kept no base, and the
    CRDT answered 410 history_expired for good."""
    data = tmp_path / "data"
    options = {"history_segment_bytes": 1024, "history_retention": Retention.parse("5ops")}
    store = FileStore(data, **options)  # type: ignore[arg-type]
    await store.open()
    writer = Writer(store)
    rng = random.Random(0)
    crdts = [f"gc:{i}" for i in range(5)]
    for _ in range(1000):
        await writer.op(rng.choice(crdts), {"op": "increment"})
    await store.compact_history()
    before = {c: await writer.value(c) for c in crdts}
    pages = {}
    for c in crdts:
        life = store._history.index.get(NS, c)
        assert life is not None
        ops, _ = await store.history(NS, c, life.epoch, life.latest, None, 100)
        pages[c] = [o["seq"] for o in ops]
    assert store._history.compactions > 5
    await store.close()
    os.unlink(data / "history" / HINT_NAME)  # what a SIGKILL mid-compaction leaves

    for restart in range(2):
        store = FileStore(data, **options)  # type: ignore[arg-type]
        await store.open()
        try:
            assert store._history.hint_lives == 0 or restart == 1
            writer = Writer(store)
            assert {c: await writer.value(c) for c in crdts} == before, restart
            for c in crdts:
                life = store._history.index.get(NS, c)
                assert life is not None
                ops, _ = await store.history(NS, c, life.epoch, life.latest, None, 100)
                seqs = [o["seq"] for o in ops]
                # At least the retained ops, newest first, without a gap.
                assert seqs[: len(pages[c])] == pages[c] or pages[c][: len(seqs)] == seqs, c
                assert len(seqs) >= 5 and seqs == list(range(seqs[0], seqs[0] - len(seqs), -1))
        finally:
            await store.close()
