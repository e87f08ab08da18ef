"""A full disk under the history's compaction (a real tmpfs): the copy of a
sparse segment's live frames to the history's head fails part-way. The
history went on taking writes after its part-written bytes: in the active
segment (16 MiB by default, so the frames written after a copy follow it in
the same file) a scan, at a start without the key directory's table, stops
there and cuts the rest as a torn tail, and once a snapshot had cut the log
behind them those acknowledged ops were gone. The history is now switched
off instead, as for any failed history write: the store refuses writes
until the history is read back from the log (here, with the probes held
off, at a restart), and the restart (twice) brings back every acknowledged
op."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

import pytest

from syncd.errors import ApiError
from syncd.store.embedded.store import FileStore
from syncd.store.history_index import Retention
from tests.store.embedded.test_failures import small_tmpfs
from tests.store.embedded.test_hint import Writer

OPTIONS = {
    "history_segment_bytes": 32 * 1024,
    "history_retention": Retention.parse("2ops"),
    "segment_bytes": 1024,
    "log_runway": False,
    "index_flush_crdts": 1 << 20,
    "probe_interval": 3600.0,
}


def fill(path: Path) -> None:
    """Take every free byte of the file system ``path`` is on."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 4096, 1):
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size):
                    pass
    finally:
        os.close(fd)


async def test_a_full_disk_during_the_history_compaction_loses_no_acknowledged_op(
    tmp_path: Path,
) -> None:
    with small_tmpfs(tmp_path / "mnt") as mnt:
        data = mnt / "data"
        store = FileStore(data, **OPTIONS)  # type: ignore[arg-type]
        await store.open()
        acked: dict[str, int] = {}
        # A set whose checkpoints let retention drop its ops, between counters
        # whose ops stay: the sealed segments end up sparse, to be copied out.
        crdts = ["gc:0", "gc:1", "gc:2", "or:big"]

        def body(crdt_id: str, i: int) -> dict[str, str]:
            if crdt_id == "or:big":
                return {"op": "add", "element": f"{i}-" + "x" * 3000}
            return {"op": "increment"}

        try:
            writer = Writer(store)
            store._history._grown = -(1 << 40)  # no compaction but the test's
            for i in range(80):
                crdt_id = "or:big" if i % 2 else crdts[i % 3]
                await writer.op(crdt_id, body(crdt_id, i))
                acked[crdt_id] = acked.get(crdt_id, 0) + 1
            filler = mnt / "filler"
            fill(filler)
            with pytest.raises(OSError) as failed:
                await store.compact_history()
            assert failed.value.errno == errno.ENOSPC
            filler.unlink()
            # Writes go on only if the history does (they did: the frames
            # after the failed copy then lay behind its bytes).
            for i in range(20):
                crdt_id = crdts[i % 4]
                try:
                    await writer.op(crdt_id, body(crdt_id, 100 + i))
                except ApiError:
                    continue
                acked[crdt_id] = acked.get(crdt_id, 0) + 1
            with contextlib.suppress(ApiError):
                await store.compact_now()  # the log behind it goes
            assert not store.ready
        finally:
            store._release()  # the process dies: no table, nothing flushed

        for _ in range(2):
            store = FileStore(data, **OPTIONS)  # type: ignore[arg-type]
            await store.open()
            try:
                assert store.ready
                writer = Writer(store)
                for crdt_id, count in acked.items():
                    value, seq = await writer.value(crdt_id)
                    assert seq == count, crdt_id
                    assert value == (count if crdt_id.startswith("gc:") else value)
                    assert crdt_id.startswith("gc:") or len(value) == count
            finally:
                await store.close()
