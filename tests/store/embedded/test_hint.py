"""The history index hint file: a clean stop writes it, a start reads it instead
of every history frame, and a missing, torn or stale one is rebuilt from the
segments with a warning."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Any

import msgpack
import pytest

from syncd.crdt.engine import Engine
from syncd.quotas import measure_unmeasured
from syncd.store.base import Usage, attribution
from syncd.store.embedded import hint as hint_file
from syncd.store.embedded.hint import HINT_NAME
from syncd.store.embedded.store import FileStore
from syncd.store.history_index import Retention
from tests.store.conftest import MakeStore

NS = "n"


class Writer:
    """An engine over a store that loads CRDTs on first use, as the server does."""

    def __init__(self, store: FileStore) -> None:
        self.engine = Engine()
        self.store = store
        store.set_snapshot_source(lambda: (), self.engine.export_one)

    async def op(self, crdt_id: str, body: Any) -> int:
        if self.engine.get(NS, crdt_id) is None:
            loaded = await self.store.load(NS, crdt_id)
            if loaded is not None:
                self.engine.load(NS, crdt_id, *loaded)
        plan = self.engine.plan(NS, crdt_id, body)
        result = await self.store.commit(NS, crdt_id, lambda: self.engine.apply(plan, 1))
        return result.seq

    async def value(self, crdt_id: str) -> Any:
        loaded = await self.store.load(NS, crdt_id)
        if loaded is None:
            return None
        fresh = Engine()
        fresh.load(NS, crdt_id, *loaded)
        read = fresh.read(NS, crdt_id)
        assert read is not None
        return read["value"], read["seq"]


async def _fill(writer: Writer, crdts: int = 40, rounds: int = 5) -> dict[str, Any]:
    for r in range(rounds):
        for c in range(crdts):
            await writer.op(f"gc:{c}", {"op": "increment", "amount": c + r + 1})
            await writer.op(f"rg:{c}", {"op": "insert", "index": 0, "text": f"{r}"})
    return {i: await writer.value(i) for c in range(crdts) for i in (f"gc:{c}", f"rg:{c}")}


async def test_a_clean_stop_writes_the_hint_and_a_start_reads_only_what_follows(
    make_store: MakeStore, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    store, _ = await make_store(data)
    expected = await _fill(Writer(store))
    await store.close()
    assert (data / "history" / HINT_NAME).exists()

    hint = data / "history" / HINT_NAME
    store, recovered = await make_store(data)
    assert store._history.hint_lives == 80
    writer = Writer(store)
    assert {i: await writer.value(i) for i in expected} == expected
    # Writes after the hint: a start after a crash finds the older hint and
    # reads the frames written after it.
    older = hint.read_bytes()
    await writer.op("gc:0", {"op": "increment", "amount": 100})
    await writer.op("gc:new", {"op": "increment"})
    await writer.op("rg:3", {"op": "delete", "index": 0})
    expected["gc:0"] = (expected["gc:0"][0] + 100, expected["gc:0"][1] + 1)
    expected["gc:new"] = (1, 1)
    expected["rg:3"] = (expected["rg:3"][0][1:], expected["rg:3"][1] + 1)
    await store.close()
    hint.write_bytes(older)
    store, _ = await make_store(data)
    assert store._history.hint_lives == 80
    writer = Writer(store)
    assert {i: await writer.value(i) for i in expected} == expected
    listed = await store.list_ids(NS, "gc:", None, 1000)
    assert len(listed) == 41 and ("gc:new", "gcounter", 1) in listed
    await store.close()
    # Without any hint: every frame, the same index.
    hint.unlink()
    store, _ = await make_store(data)
    assert store._history.hint_lives == 0
    writer = Writer(store)
    assert {i: await writer.value(i) for i in expected} == expected


@pytest.mark.parametrize("damage", ["torn", "garbage", "stale"])
async def test_a_damaged_or_stale_hint_is_rebuilt_from_the_segments(
    make_store: MakeStore, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    data = tmp_path / "data"
    store, _ = await make_store(data)
    expected = await _fill(Writer(store), crdts=10)
    await store.close()
    hint = data / "history" / HINT_NAME
    if damage == "torn":
        with open(hint, "r+b") as f:
            f.truncate(os.path.getsize(hint) // 2)
    elif damage == "garbage":
        hint.write_bytes(b"SYNCDHI1" + os.urandom(200))
    else:  # the history was cut back behind the hint's end (a lost tail)
        (segment,) = sorted((data / "history").glob("*.hist"))
        with open(segment, "r+b") as f:
            f.truncate(os.path.getsize(segment) - 10)
    caplog.set_level(logging.WARNING, logger="syncd.store")
    store, _ = await make_store(data)
    assert store._history.hint_lives == 0
    assert "hint" in caplog.text
    writer = Writer(store)
    # (For "stale", the frame the cut took came back from the main log.)
    assert {i: await writer.value(i) for i in expected} == expected


async def test_a_hint_of_an_earlier_version_is_rebuilt_with_every_op_s_writer(
    make_store: MakeStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A version 3 hint (the whole index as one msgpack stream) is well formed
    but not used: the index is rebuilt from the history files, and knows each
    op's writer; the close writes a version 4 table, which the next start uses."""
    data = tmp_path / "data"
    store, _ = await make_store(data)
    writer = Writer(store)
    await writer.op("rg:doc", {"op": "insert", "index": 0, "text": "a", "origin": "agent:x"})
    await writer.op("rg:doc", {"op": "delete", "index": 0})
    await store.close()
    hint = data / "history" / HINT_NAME
    packer = msgpack.Packer(use_bin_type=True)
    header = {"end": 0, "last_lsn": 0, "segments": [], "lives": 0}
    body = b"SYNCDHI3" + packer.pack(header)
    hint.write_bytes(body + zlib.crc32(body).to_bytes(4, "little"))
    caplog.set_level(logging.WARNING, logger="syncd.store")
    store, _ = await make_store(data)
    assert store._history.hint_lives == 0
    assert "hint is unusable (not a hint file of this version)" in caplog.text
    life = store._history.index.get(NS, "rg:doc")
    assert life is not None and list(life.writers) == [1, 1]
    records, _ = await store.history(NS, "rg:doc", life.epoch, 2, None, 2)
    assert list(life.tags) == [attribution(r)[1] for r in reversed(records)]
    await store.close()
    assert hint.read_bytes().startswith(hint_file.MAGIC)
    store, _ = await make_store(data)
    assert store._history.hint_lives == 1
    life = store._history.index.get(NS, "rg:doc")
    assert life is not None and list(life.writers) == [1, 1] and all(life.tags)


async def test_compaction_rewrites_the_table_with_the_records_it_moved(
    make_store: MakeStore, tmp_path: Path
) -> None:
    """Compaction trims and moves the rows of CRDTs not in memory too: the
    table it puts in place holds their new positions, and segments go. (The
    store is opened again with a shorter retention, so every row trims.)"""
    data = tmp_path / "data"
    store, _ = await make_store(data, history_segment_bytes=4096)
    writer = Writer(store)
    for r in range(30):  # enough bytes per CRDT for checkpoints, which trims start from
        for c in range(8):
            await writer.op(f"rg:{c}", {"op": "insert", "index": 0, "text": f"{r:03d}" * 300})
    expected = {f"rg:{c}": await writer.value(f"rg:{c}") for c in range(8)}
    await store.close()
    store, _ = await make_store(
        data, history_segment_bytes=4096, history_retention=Retention.parse("3ops")
    )
    segments = store._history.files.segment_count
    table = data / "history" / HINT_NAME
    before = table.stat().st_ino
    assert store._history.hint_lives == 8 and len(store._history.index) == 0
    assert await store.compact_history() > 0
    assert store._history.files.segment_count < segments
    assert table.exists() and table.stat().st_ino != before
    writer = Writer(store)
    assert {i: await writer.value(i) for i in expected} == expected
    await store.close()
    store, _ = await make_store(
        data, history_segment_bytes=4096, history_retention=Retention.parse("3ops")
    )
    assert store._history.hint_lives == 8
    writer = Writer(store)
    assert {i: await writer.value(i) for i in expected} == expected


_KILL_WHILE_HINTING = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from syncd.store.embedded import hint
    from syncd.store.embedded.store import FileStore
    from syncd.crdt.engine import Engine

    def finish_then_die(self, header):
        # Half a table on disk under its temporary name, then SIGKILL.
        self._f.write(b"x" * 100)
        self._f.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    hint.TableWriter.finish = finish_then_die

    async def main():
        store = FileStore(sys.argv[1], fsync="always")
        await store.open()
        engine = Engine()
        store.set_snapshot_source(lambda: (), engine.export_one)
        for i in range(50):
            plan = engine.plan("n", f"gc:{i % 5}", {"op": "increment"})
            await store.commit("n", plan.id, lambda: engine.apply(plan, 1))
        await store.close()

    asyncio.run(main())
    """
)


async def test_sigkill_during_the_hint_write_loses_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", _KILL_WHILE_HINTING, str(data)],
        cwd=root,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert (data / "history" / (HINT_NAME + ".tmp")).exists()
    assert not (data / "history" / HINT_NAME).exists()
    store = FileStore(data)
    await store.open()
    try:
        assert store._history.hint_lives == 0
        writer = Writer(store)
        assert [await writer.value(f"gc:{i}") for i in range(5)] == [(10, 10)] * 5
        assert not (data / "history" / (HINT_NAME + ".tmp")).exists()
    finally:
        await store.close()


async def test_sizes_come_back_with_the_hint_and_are_measured_again_without_it(
    make_store: MakeStore, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    store, _ = await make_store(data)
    writer = Writer(store)
    await _fill(writer, crdts=6, rounds=3)
    exact = {}
    for crdt_id in [f"{t}:{c}" for t in ("gc", "rg") for c in range(6)]:
        entry = writer.engine.get(NS, crdt_id)
        assert entry is not None
        writer.engine.resize(entry)  # measured now, as an eviction would
        store.note_size(NS, crdt_id, entry.state_bytes)
        exact[crdt_id] = entry.state_bytes
    usage = store.usage_now(NS)
    assert usage == Usage(12, sum(exact.values()), 0)
    await store.close()

    store, _ = await make_store(data)  # with the hint: every size
    assert store.usage_now(NS) == usage
    await writer_after_hint(store)
    assert store.usage_now(NS).unmeasured == 0
    await store.close()
    (data / "history" / HINT_NAME).unlink()

    store, _ = await make_store(data)  # without: counted, not measured
    assert store.usage_now(NS) == Usage(12, 0, 12)
    assert await measure_unmeasured(store, Engine()) == 12
    measured = store.usage_now(NS)
    assert measured.unmeasured == 0 and measured.crdts == 12
    assert (
        measured.bytes
        == sum(exact.values()) + store._history.index.size_of(NS, "gc:0") - exact["gc:0"]
    )


async def writer_after_hint(store: FileStore) -> None:
    """One op after the hint; the engine reports the size, as the service does."""
    writer = Writer(store)
    await writer.op("gc:0", {"op": "increment", "amount": 7})
    entry = writer.engine.get(NS, "gc:0")
    assert entry is not None
    store.note_size(NS, "gc:0", entry.state_bytes)
