"""The key directory: its sorted table (hint.py) and the overlay of CRDTs in
use over it (keydir.py). A CRDT nobody uses costs no memory, a start reads
the table's block directory, and what changed since the last table is
written in the background."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from syncd.store.base import Usage
from syncd.store.embedded.hint import BLOCK_ROWS, HINT_NAME, Header, TableWriter, open_table
from syncd.store.embedded.keydir import KeyDir, decode_row, encode_row, peek_row
from syncd.store.embedded.store import FileStore
from syncd.store.history_index import Life, Retention
from tests.store.conftest import MakeStore
from tests.store.embedded.test_hint import NS, Writer
from tests.store.support import deleted

ROOT = Path(__file__).resolve().parents[3]


def _life(epoch: str, ops: int, type_name: str = "gcounter", size: int = 40) -> Life:
    life = Life(epoch)
    life.from_start = True
    life.type_name, life.size = type_name, size
    for seq in range(1, ops + 1):
        life.seqs.append(seq)
        life.ts.append(1000 + seq)
        life.pos.append(seq * 100)
        life.writers.append(7)
        life.tags.append(0)
    return life


def _write_table(directory: Path, keys: list[tuple[str, str]]) -> None:
    writer = TableWriter(str(directory))
    for i, key in enumerate(keys):
        life = _life(f"e{i}", 1 + i % 3, size=-1 if i % 10 == 0 else 40)
        writer.add(key, encode_row(life), life.type_name, life.size)
    writer.finish(Header(end=0, last_lsn=5, segments={}))


# -- the table ------------------------------------------------------------------


def test_a_table_finds_every_row_across_its_blocks_and_nothing_else(tmp_path: Path) -> None:
    keys = sorted((f"ns{i % 3}", f"gc:{i:05d}") for i in range(BLOCK_ROWS * 5 + 7))
    _write_table(tmp_path, keys)
    table = open_table(str(tmp_path), [])
    assert table is not None
    try:
        assert len(table) == len(keys) and table.blocks == 6
        for i, key in enumerate(keys):
            entry = table.get(key)
            assert entry is not None
            life = decode_row(entry)
            assert life.epoch == f"e{i}" and len(life.seqs) == 1 + i % 3
            assert life.type_name == "gcounter" and life.size == (-1 if i % 10 == 0 else 40)
        assert table.get(("ns0", "gc:missing")) is None
        assert table.get(("a", "b")) is None and table.get(("zz", "z")) is None
        middle = keys[len(keys) // 2]
        assert [k for k, _ in table.scan(middle)] == keys[len(keys) // 2 :]
        assert [k for k, _ in table.scan()] == keys
        # The header's usage is the sum over the rows.
        for ns in ("ns0", "ns1", "ns2"):
            mine = [i for i, k in enumerate(keys) if k[0] == ns]
            unmeasured = sum(1 for i in mine if i % 10 == 0)
            expected = (len(mine), 40 * (len(mine) - unmeasured), unmeasured)
            assert table.header.usage[ns] == expected
    finally:
        table.close()


def test_rows_out_of_order_are_refused(tmp_path: Path) -> None:
    writer = TableWriter(str(tmp_path))
    writer.add(("n", "b"), b"x", None, -1)
    with pytest.raises(ValueError, match="out of order"):
        writer.add(("n", "a"), b"x", None, -1)
    writer.abort()
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("damage", ["torn", "block", "directory", "version"])
def test_a_damaged_table_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    _write_table(tmp_path, [("n", f"gc:{i:04d}") for i in range(300)])
    path = tmp_path / HINT_NAME
    data = bytearray(path.read_bytes())
    if damage == "torn":
        data = data[: len(data) - 30]
    elif damage == "block":
        data[100] ^= 0xFF
    elif damage == "directory":
        data[-40] ^= 0xFF
    else:
        data[:8] = b"SYNCDHI3"
    path.write_bytes(bytes(data))
    caplog.set_level(logging.WARNING, logger="syncd.store")
    assert open_table(str(tmp_path), []) is None
    assert "hint is unusable" in caplog.text


def test_a_table_naming_a_segment_that_is_gone_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = TableWriter(str(tmp_path))
    writer.finish(Header(end=0, last_lsn=0, segments={1: (10, 1), 2: (10, 1)}))
    caplog.set_level(logging.WARNING, logger="syncd.store")
    assert open_table(str(tmp_path), [2]) is None
    assert "segments that are gone (1)" in caplog.text
    table = open_table(str(tmp_path), [1, 2])
    assert table is not None
    table.close()


# -- the overlay ------------------------------------------------------------------


def test_lives_read_during_a_compaction_are_trimmed_and_moved_as_the_new_table(
    tmp_path: Path,
) -> None:
    writer = TableWriter(str(tmp_path))
    life = _life("e", 6)
    life.from_start = False
    life.cp_seqs.append(3)
    life.cp_pos.append(350)
    writer.add(("n", "a"), encode_row(life), life.type_name, life.size)
    writer.finish(Header(end=0, last_lsn=0, segments={}))
    table = open_table(str(tmp_path), [])
    assert table is not None
    index = KeyDir()
    index.attach(table)
    index.compacting(Retention(ops=2), 0, {500: 9000, 350: 9350})
    got = index.get("n", "a")
    assert got is not None
    # Trimmed to the checkpoint at 3 (the newest base at or before 6 - 2),
    # and the positions the compaction moved are the new ones.
    assert list(got.seqs) == [4, 5, 6] and list(got.pos) == [400, 9000, 600]
    assert list(got.cp_seqs) == [3] and list(got.cp_pos) == [9350]
    index.close()


async def test_background_tables_keep_the_overlay_small(
    make_store: MakeStore, tmp_path: Path
) -> None:
    """With tables written every 50 changed CRDTs and 20 clean lives cached,
    the overlay stays within those bounds however many CRDTs there are, and
    every one reads back right, before and after a restart."""
    data = tmp_path / "data"
    store, _ = await make_store(data, index_flush_crdts=50, index_cached_crdts=20)
    writer = Writer(store)
    most = 0
    for i in range(400):
        await writer.op(f"gc:{i:04d}", {"op": "increment", "amount": i + 1})
        writer.engine.drop(NS, f"gc:{i:04d}")  # as an eviction does
        most = max(most, len(store._history.index))
    await store._history.wait_index_flush()
    history = store._history
    assert history.index_flushes >= 6
    assert most <= 50 * 2 + 20 + 1
    assert store.usage_now(NS) == Usage(400, 0, 400)
    values = {f"gc:{i:04d}": await writer.value(f"gc:{i:04d}") for i in range(400)}
    assert values == {f"gc:{i:04d}": (i + 1, 1) for i in range(400)}
    listed = await store.list_ids(NS, "gc:", None, 1000)
    assert [c for c, _, _ in listed] == sorted(values)
    await store.close()
    store, _ = await make_store(data, index_flush_crdts=50, index_cached_crdts=20)
    assert store._history.hint_lives == 400 and len(store._history.index) == 0
    writer = Writer(store)
    assert {k: await writer.value(k) for k in values} == values
    assert len(store._history.index) <= 20


async def test_listing_and_usage_follow_the_table_and_every_change_since(
    make_store: MakeStore, tmp_path: Path
) -> None:
    """Deletes, creations, new sizes and a new life of a deleted id, over a
    table: listings page in id order and the usage sums stay exact, across
    background tables and a restart."""
    rng = random.Random(30)
    data = tmp_path / "data"
    store, _ = await make_store(data, index_flush_crdts=16, index_cached_crdts=8)
    writer = Writer(store)
    live: dict[str, int] = {}  # id -> size (-1: unmeasured)
    for i in range(120):
        await writer.op(f"gc:{i:03d}", {"op": "increment"})
        live[f"gc:{i:03d}"] = -1
    await store.close()
    for restart in range(2):
        store, _ = await make_store(data, index_flush_crdts=16, index_cached_crdts=8)
        writer = Writer(store)
        for _ in range(150):
            crdt_id = f"gc:{rng.randrange(160):03d}"
            action = rng.random()
            if action < 0.2 and crdt_id in live:
                await store.append([deleted(crdt_id, NS)])
                writer.engine = type(writer.engine)()  # forget it, as a delete does
                del live[crdt_id]
            elif action < 0.5 and crdt_id in live:
                size = rng.randrange(1, 500)
                store.note_size(NS, crdt_id, size)
                live[crdt_id] = size
            else:
                if crdt_id not in live:
                    writer.engine = type(writer.engine)()
                await writer.op(crdt_id, {"op": "increment"})
                live.setdefault(crdt_id, -1)
        await store._history.wait_index_flush()
        expected = Usage(
            len(live),
            sum(s for s in live.values() if s >= 0),
            sum(1 for s in live.values() if s < 0),
        )
        assert store.usage_now(NS) == expected, restart
        pages: list[str] = []
        after = None
        while True:
            page = await store.list_ids(NS, "gc:", after, 7)
            if not page:
                break
            pages += [c for c, _, _ in page]
            after = page[-1][0]
        assert pages == sorted(live)
        assert [c for c, _, _ in await store.list_ids(NS, "gc:01", None, 100)] == sorted(
            c for c in live if c.startswith("gc:01")
        )
        await store.close()


_CRASH_AFTER_TABLES = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from syncd.store.embedded import hint, keydir
    from syncd.store.embedded.store import FileStore
    from syncd.crdt.engine import Engine

    mode = sys.argv[2]
    finishes = 0
    real_finish = hint.TableWriter.finish

    def finish(self, header):
        global finishes
        finishes += 1
        if mode == "mid-table" and finishes == 3:
            self._f.write(b"x" * 100)  # half a table under its temporary name
            self._f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return real_finish(self, header)

    hint.TableWriter.finish = finish
    real_rewrite = keydir.rewrite_table

    def rewrite(*args):
        if mode == "mid-compaction":
            os.kill(os.getpid(), signal.SIGKILL)  # the segments went, no table yet
        return real_rewrite(*args)

    import syncd.store.embedded.history as history_module
    history_module.rewrite_table = rewrite

    async def main():
        store = FileStore(
            sys.argv[1], fsync="always", index_flush_crdts=32, index_cached_crdts=8,
            history_segment_bytes=2048,
        )
        await store.open()
        engine = Engine()
        store.set_snapshot_source(lambda: (), engine.export_one)
        for i in range(300):
            crdt_id = f"gc:{i % 120:03d}"
            if engine.get("n", crdt_id) is None:
                loaded = await store.load("n", crdt_id)
                if loaded is not None:
                    engine.load("n", crdt_id, *loaded)
            plan = engine.plan("n", crdt_id, {"op": "increment"})
            await store.commit("n", crdt_id, lambda: engine.apply(plan, 1))
            print(crdt_id, flush=True)  # acknowledged
            if i % 40 == 39:
                engine = Engine()  # every CRDT leaves memory now and then
                store.set_snapshot_source(lambda: (), engine.export_one)
        # Quiet before the kill: a history compaction the last ops started
        # removes the table before its segments go ("mid-compaction" kills
        # there on purpose); one still running here would make "after-tables"
        # that case by chance.
        await store._compaction.wait_history()
        await store._history.wait_index_flush()
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("mode", ["after-tables", "mid-table", "mid-compaction"])
async def test_sigkill_around_background_tables_and_compaction_loses_nothing(
    tmp_path: Path, mode: str
) -> None:
    """SIGKILL after background tables were written (a start reads the newest
    and the frames after it), in the middle of writing one, and during a
    compaction after it deleted segments and before its table was in place
    (a start rebuilds from the segments; with 2 KiB history segments the
    first compaction comes within ~40 ops): every acknowledged op is there."""
    data = tmp_path / "data"
    proc = subprocess.run(
        [sys.executable, "-c", _CRASH_AFTER_TABLES, str(data), mode],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    acked: dict[str, int] = {}
    for line in proc.stdout.decode().split():
        acked[line] = acked.get(line, 0) + 1
    assert len(acked) > 20
    store = FileStore(data)
    await store.open()
    try:
        history = store._history
        if mode == "after-tables":
            assert history.hint_lives > 0  # a background table, then more ops
        if mode == "mid-compaction":
            assert history.hint_lives == 0  # removed before the segments went
        assert not os.path.exists(os.path.join(data, "history", HINT_NAME + ".tmp"))
        writer = Writer(store)
        for crdt_id, count in acked.items():
            value = await writer.value(crdt_id)
            assert value is not None and value[0] >= count, (crdt_id, value, count)
        # The op in flight at the kill may be durable without its answer.
        assert len(acked) <= store.usage_now(NS).crdts <= len(acked) + 1
    finally:
        await store.close()


async def test_a_start_reads_the_directory_not_the_rows(make_store: MakeStore) -> None:
    """Opening a store holds none of its CRDTs in memory."""
    store, _ = await make_store(index_flush_crdts=1000)
    writer = Writer(store)
    for i in range(200):
        await writer.op(f"gc:{i}", {"op": "increment"})
    data = store.data_dir
    await store.close()
    again = FileStore(data)
    await again.open()
    try:
        assert again._history.hint_lives == 200
        assert len(again._history.index) == 0 and again._history.index.reads == 0
        await asyncio.sleep(0)
    finally:
        await again.close()


async def test_sizes_noted_without_writes_make_a_table_too(
    make_store: MakeStore, tmp_path: Path
) -> None:
    """After a crash the engine measures CRDTs it reads back: those sizes
    change the directory with no write to start a table, so the sizes do."""
    data = tmp_path / "data"
    store, _ = await make_store(data, index_flush_crdts=1000)
    writer = Writer(store)
    for i in range(30):
        await writer.op(f"gc:{i:02d}", {"op": "increment"})
    await store.close()
    store, _ = await make_store(data, index_flush_crdts=10)
    for i in range(30):
        store.note_size(NS, f"gc:{i:02d}", 100 + i)
        await asyncio.sleep(0)
    await store._history.wait_index_flush()
    assert store._history.index_flushes >= 2
    assert store._history.index.dirty < 10
    assert store.usage_now(NS) == Usage(30, sum(100 + i for i in range(30)), 0)


@pytest.mark.parametrize(
    ("ops", "from_start", "checkpoints"),
    [
        (0, False, []),
        (0, False, [4]),
        (3, True, []),
        (3, False, []),
        (3, False, [2]),
        (0, True, []),
    ],
)
def test_a_peeked_row_says_what_its_decoded_life_does(
    ops: int, from_start: bool, checkpoints: list[int]
) -> None:
    """holds() of a CRDT not in memory reads its row without building it."""
    life = _life("e9", ops)
    life.from_start = from_start
    for seq in checkpoints:
        life.cp_seqs.append(seq)
        life.cp_pos.append(seq * 1000)
    entry = (encode_row(life), life.type_name, life.size)
    decoded = decode_row(entry)
    assert peek_row(entry) == (decoded.epoch, decoded.latest, decoded.oldest is not None)


async def test_a_backup_carries_the_table_and_starts_from_it(
    make_store: MakeStore, tmp_path: Path
) -> None:
    """A restored backup reads the key directory's table and the frames after
    it, not every frame, and holds every CRDT."""
    store, _ = await make_store(tmp_path / "data", index_flush_crdts=30)
    writer = Writer(store)
    for i in range(100):
        await writer.op(f"gc:{i:03d}", {"op": "increment", "amount": i + 1})
    await store._history.wait_index_flush()
    assert store._history.index_flushes >= 1
    await store.backup(str(tmp_path / "copy"))
    restored = FileStore(tmp_path / "copy")
    await restored.open()
    try:
        assert restored._history.hint_lives >= 30
        reader = Writer(restored)
        assert [await reader.value(f"gc:{i:03d}") for i in range(100)] == [
            (i + 1, 1) for i in range(100)
        ]
    finally:
        await restored.close()


@pytest.mark.parametrize(("flush", "cached"), [(0, 10), (10, 0), (10, -1)])
def test_a_key_directory_without_room_for_a_life_it_reads_back_is_refused(
    flush: int, cached: int
) -> None:
    """A life read back from the table is cached before the caller changes it;
    with ``cached_lives=0`` it was evicted at once, the change (an op) was
    lost from the index and the next flush deleted the key's row (found by a
    seeded KeyDir checker in 20 steps; the server's default is 16,384)."""
    with pytest.raises(ValueError, match="must be positive"):
        KeyDir(flush_lives=flush, cached_lives=cached)
