"""History in the stores: retained ops and checkpoints, rebuilt states, retention
and compaction, across restarts and a lost history file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgpack
import pytest

from syncd.crdt.engine import Engine
from syncd.crdt.types import crdt_class
from syncd.crdt.window import text_key
from syncd.errors import ApiError
from syncd.store.base import Retained, attribution
from syncd.store.embedded.history_files import READ_GAP, READ_SPAN, HistoryFiles, split
from syncd.store.embedded.log import HEADER_SIZE, frame
from syncd.store.embedded.store import FileStore
from syncd.store.history_index import HistoryIndex, Retention
from syncd.store.memory import MemoryStore
from tests.store.conftest import MakeStore

NS = "n"


# -- the retention setting ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ops", "age_ms"),
    [
        ("10000ops", 10000, None),
        ("7d", None, 7 * 86_400_000),
        ("12h", None, 43_200_000),
        ("30m", None, 1_800_000),
        ("90s", None, 90_000),
        ("0ops", 0, None),
    ],
)
def test_retention_parses_counts_and_ages(text: str, ops: int | None, age_ms: int | None) -> None:
    retention = Retention.parse(text)
    assert (retention.ops, retention.age_ms) == (ops, age_ms)


@pytest.mark.parametrize("text", ["", "7", "7w", "-1ops", "1.5d", "ops", "10 000ops"])
def test_a_bad_retention_is_refused_naming_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match="10000ops"):
        Retention.parse(text)


# -- the index ---------------------------------------------------------------------


def _index(n: int, checkpoint_every: int, ts_step: int = 1000) -> HistoryIndex:
    index = HistoryIndex()
    for seq in range(1, n + 1):
        index.add_op(NS, "pn:a", "e", seq, seq * ts_step, seq * 10, 100)
        if seq % checkpoint_every == 0:
            index.add_checkpoint(NS, "pn:a", "e", seq, seq * 10 + 1, 100)
    return index


def test_count_retention_keeps_at_least_that_many_ops_and_a_base_before_them() -> None:
    index = _index(1000, 100)
    index.trim(Retention(ops=250), now_ms=0)
    life = index.get(NS, "pn:a")
    assert life is not None
    # The state at 750 must stay reachable: the checkpoint at 700 and ops 701...
    assert (
        life.oldest == 700 and life.seqs[0] == 701 and list(life.cp_seqs) == [700, 800, 900, 1000]
    )
    cp, ops = index.base(NS, "pn:a", "e", 1000, 750)
    assert cp == 7001 and ops == [seq * 10 for seq in range(701, 751)]
    with pytest.raises(ApiError) as expired:
        index.base(NS, "pn:a", "e", 1000, 699)
    assert expired.value.status == 410 and expired.value.body()["oldest"] == 700


def test_age_retention_keeps_the_state_before_the_oldest_young_op() -> None:
    index = _index(1000, 100, ts_step=1000)  # op seq at time seq s
    index.trim(Retention(age_ms=300_000), now_ms=1_000_000)  # ops from seq 700 on are young
    life = index.get(NS, "pn:a")
    assert life is not None and life.oldest == 600 and life.seqs[0] == 601


def test_without_a_base_old_enough_everything_stays() -> None:
    index = _index(50, 100)
    index.trim(Retention(ops=10), now_ms=0)
    life = index.get(NS, "pn:a")
    assert life is not None and life.oldest == 0 and len(life.seqs) == 50


def test_a_gap_or_another_life_is_not_history_of_this_one() -> None:
    index = _index(10, 100)
    index.add_op(NS, "pn:a", "e", 12, 0, 120, 100)  # seq 11 lost
    # Op 12 is held and listed, but no state before it can be rebuilt.
    assert index.page(NS, "pn:a", "e", 12, None, 100) == ([120], 12)
    with pytest.raises(ApiError):
        index.base(NS, "pn:a", "e", 12, 5)
    assert index.page(NS, "pn:a", "other", 12, None, 100) == ([], 12)


# -- a store under an engine ---------------------------------------------------------


class Writer:
    """An engine over a store, applying ops as the service does."""

    def __init__(self, store: Any) -> None:
        self.engine = Engine()
        self.store = store
        store.set_snapshot_source(self.engine.export_entries, self.engine.export_one)

    async def op(self, crdt_id: str, body: Any, client_id: int = 1) -> int:
        plan = self.engine.plan(NS, crdt_id, body)
        result = await self.store.commit(NS, crdt_id, lambda: self.engine.apply(plan, client_id))
        return result.seq

    def load(self, recovered: Any) -> None:
        for entry in recovered.entries:
            self.engine.import_entry(entry)
        for record in recovered.records:
            self.engine.replay(record)

    async def at(self, crdt_id: str, seq: int) -> Any:
        entry = self.engine.get(NS, crdt_id)
        assert entry is not None
        checkpoint, records = await self.store.history_base(
            NS, crdt_id, entry.epoch, entry.seq, seq
        )
        cls = crdt_class(entry.type)
        crdt = cls.from_state(checkpoint["state"]) if checkpoint else cls.new()
        for record in records:
            crdt.apply_delta(record["op"])
        return crdt.view(0)["value"]


def _text_ops() -> list[dict[str, Any]]:
    return [
        {"op": "insert", "index": i, "text": chr(97 + i % 26) * (1 + i % 3)} for i in range(300)
    ]


async def _fill(writer: Writer) -> dict[int, Any]:
    """300 inserts to an RGA and 300 increments to a counter; the RGA's text after each."""
    texts: dict[int, Any] = {0: []}
    for op in _text_ops():
        seq = await writer.op("rg:doc", op)
        texts[seq] = writer.engine.read(NS, "rg:doc")["value"]  # type: ignore[index]
        await writer.op("pn:count", {"op": "increment", "amount": 2})
    return texts


async def test_filestore_rebuilds_any_retained_state_across_restarts(
    make_store: MakeStore, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    store, _ = await make_store(data, history_segment_bytes=32 * 1024)
    writer = Writer(store)
    texts = await _fill(writer)
    for seq in (0, 1, 57, 150, 299, 300):
        assert await writer.at("rg:doc", seq) == texts[seq]
    assert await writer.at("pn:count", 120) == 240
    page, oldest = await store.history(
        NS, "rg:doc", writer.engine.get(NS, "rg:doc").epoch, 300, 101, 3
    )
    assert [r["seq"] for r in page] == [100, 99, 98] and oldest == 0
    await store.compact_now()  # the log forgets; the history does not
    await store.close()

    store, recovered = await make_store(data, history_segment_bytes=32 * 1024)
    writer = Writer(store)
    writer.load(recovered)
    for seq in (0, 57, 299):
        assert await writer.at("rg:doc", seq) == texts[seq]


async def test_a_lost_history_file_is_rebuilt_from_the_log_and_the_snapshot(
    make_store: MakeStore, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    store, _ = await make_store(data)
    writer = Writer(store)
    texts = await _fill(writer)
    await store.compact_now()
    for n in range(5):
        await writer.op("rg:doc", {"op": "insert", "index": 0, "text": str(n)})
        texts[301 + n] = writer.engine.read(NS, "rg:doc")["value"]  # type: ignore[index]
    await store.close()
    for name in os.listdir(data / "history"):
        os.unlink(data / "history" / name)

    store, recovered = await make_store(data)
    writer = Writer(store)
    writer.load(recovered)
    # From the snapshot's checkpoint on: the ops after it came back from the log.
    for seq in range(300, 306):
        assert await writer.at("rg:doc", seq) == texts[seq]
    with pytest.raises(ApiError) as expired:
        await writer.at("rg:doc", 10)
    assert expired.value.status == 410 and expired.value.body()["oldest"] == 300


async def test_a_torn_history_tail_is_cut_and_refilled(
    make_store: MakeStore, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    store, _ = await make_store(data)
    writer = Writer(store)
    texts = await _fill(writer)
    await store.close()
    (segment,) = sorted((data / "history").glob("*.hist"))
    with open(segment, "r+b") as f:
        f.truncate(os.path.getsize(segment) - 37)  # a crash mid-write
    store, recovered = await make_store(data)
    writer = Writer(store)
    writer.load(recovered)
    for seq in (0, 200, 299, 300):
        assert await writer.at("rg:doc", seq) == texts[seq]


async def test_compaction_keeps_what_retention_promises_and_frees_the_rest(
    make_store: MakeStore, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    options = {"history_segment_bytes": 16 * 1024, "history_retention": Retention(ops=40)}
    store, _ = await make_store(data, **options)
    writer = Writer(store)
    # A cold CRDT written once, early: its whole history must survive compaction.
    await writer.op("lw:cold", {"op": "set", "value": "first"})
    await writer.op("lw:cold", {"op": "set", "value": "second"})
    for i in range(3000):
        await writer.op("pn:hot", {"op": "increment", "amount": 1}, client_id=1 + i % 3)
    # Compaction ran on its own as the history grew by a segment at a time:
    # about 3000 op records of some 130 bytes were written, few stay.
    await store.compact_history()
    assert store._history.compactions > 3
    assert store.history_bytes < 3 * 16 * 1024
    epoch = writer.engine.get(NS, "pn:hot").epoch
    _, oldest = await store.history(NS, "pn:hot", epoch, 3000, None, 1)
    assert 3000 - 40 - 2000 <= oldest <= 3000 - 40  # at least 40 ops, and not much more
    assert await writer.at("pn:hot", 3000 - 40) == 3000 - 40
    assert await writer.at("lw:cold", 0) is None
    assert await writer.at("lw:cold", 1) == "first"
    await store.close()

    store, recovered = await make_store(data, **options)
    writer = Writer(store)
    writer.load(recovered)
    assert await writer.at("pn:hot", 3000 - 40) == 3000 - 40
    assert await writer.at("lw:cold", 1) == "first"


async def test_memory_store_keeps_history_too() -> None:
    store = MemoryStore(history_retention=Retention(ops=5))
    await store.open()
    writer = Writer(store)
    for _ in range(400):  # a checkpoint every 16 KiB of ops: two of them
        await writer.op("pn:a", {"op": "decrement"})
    assert await writer.at("pn:a", 12) == -12
    store.compact_history(now_ms=0)
    assert await writer.at("pn:a", 395) == -395
    with pytest.raises(ApiError) as expired:
        await writer.at("pn:a", 2)
    assert 200 < expired.value.body()["oldest"] <= 395


def test_filestore_default_retention_is_the_documented_one(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "d")
    assert str(store._history.retention) == "1000ops"


def test_a_batch_indexes_as_its_ops_would_one_by_one(tmp_path: Path) -> None:
    """The batch indexer's fast path for runs of one CRDT (filestore_history.py)
    gives the same index as one add_op per op (each op's writer and tag
    too): across runs, interleaved CRDTs, a gap, a copy of an op already
    held, a new life and a delete."""
    import random

    from syncd.store.embedded.history import FileStoreHistory

    rng = random.Random(3)
    seqs = {"a": 0, "b": 0}
    epochs = {"a": "e1", "b": "e1"}
    written: list[Any] = []
    for lsn in range(1, 400):
        crdt = rng.choice("ab")
        roll = rng.random()
        if roll < 0.02:
            written.append((b"x" * 40, {"kind": "deleted", "ns": "n", "id": crdt}, lsn))
            seqs[crdt], epochs[crdt] = 0, f"e{lsn}"
            continue
        if roll < 0.05:
            seqs[crdt] += 3  # a gap
        elif roll < 0.08 and seqs[crdt] > 1:
            seqs[crdt] -= 1  # a copy of one held already
        seqs[crdt] += 1
        record = {"kind": "op", "ns": "n", "id": crdt, "epoch": epochs[crdt], "seq": seqs[crdt]}
        record["ts"] = lsn
        record["client_id"] = rng.choice([1, 2])
        record["op"] = {"op": rng.choice(["insert", "delete"])}
        if rng.random() < 0.3:
            record["origin"] = rng.choice(["agent:a", "agent:b"])
        written.append((b"y" * rng.randint(30, 90), record, lsn))

    batched = FileStoreHistory(str(tmp_path / "a"), Retention.parse("1000ops"), lambda: 0, 1 << 20)
    for i in range(0, len(written), 37):
        batched._index_written(i * 100, written[i : i + 37])
    single = HistoryIndex()
    for i in range(0, len(written), 37):
        pos = i * 100
        for data, record, _ in written[i : i + 37]:
            if record["kind"] == "op":
                single.add_op(
                    "n",
                    record["id"],
                    record["epoch"],
                    record["seq"],
                    record["ts"],
                    pos,
                    len(data) - 16,
                    *attribution(record),
                )
            else:
                single.deleted("n", record["id"])
            pos += len(data)
    for crdt in "ab":
        mine, theirs = batched.index._lives.get(("n", crdt)), single._lives.get(("n", crdt))
        assert (mine is None) == (theirs is None)
        if mine is not None and theirs is not None:
            assert (mine.epoch, list(mine.seqs), list(mine.ts), list(mine.pos)) == (
                theirs.epoch,
                list(theirs.seqs),
                list(theirs.ts),
                list(theirs.pos),
            )
            assert (list(mine.writers), list(mine.tags)) == (
                list(theirs.writers),
                list(theirs.tags),
            )
            assert all(mine.tags)  # every op's attribution known
            assert mine.since_checkpoint == theirs.since_checkpoint


# -- attribution: each op's writer and tag -------------------------------------------


def _attributed(seq: int) -> dict[str, Any]:
    record: dict[str, Any] = {
        "kind": "op",
        "seq": seq,
        "client_id": seq % 3,
        "op": {"op": "insert" if seq % 2 else "delete"},
    }
    if seq % 5 == 0:
        record["origin"] = f"agent:{seq % 2}"
    if seq == 10:
        record["reverts"] = {"client_id": 1, "since_seq": 1, "until_seq": 9}
    return record


def test_the_index_keeps_each_op_s_writer_and_tag_through_windows_and_trims() -> None:
    index = HistoryIndex()
    for seq in range(1, 31):
        index.add_op(NS, "rg:a", "e", seq, seq, seq * 10, 100, *attribution(_attributed(seq)))
        if seq % 10 == 0:
            index.add_checkpoint(NS, "rg:a", "e", seq, seq * 10 + 1, 100)
    (positions, seqs, writers, tags), oldest = index.window(NS, "rg:a", "e", 30, 12, 5)
    assert oldest == 0 and seqs == [12, 13, 14, 15, 16] and positions == [120, 130, 140, 150, 160]
    assert list(zip(writers, tags, strict=True)) == [attribution(_attributed(seq)) for seq in seqs]
    (_, seqs, _, _), _ = index.window(NS, "rg:a", "e", 30, None, 3)
    assert seqs == [1, 2, 3]  # from the oldest rebuildable seq (0) on
    assert index.window(NS, "rg:a", "other-life", 30, None, 3) == (([], [], [], []), 30)
    index.trim(Retention(ops=12), 0)
    life = index.get(NS, "rg:a")
    assert life is not None
    assert len(life.seqs) == len(life.ts) == len(life.pos) == len(life.writers) == len(life.tags)
    (_, seqs, writers, tags), oldest = index.window(NS, "rg:a", "e", 30, None, 100)
    assert oldest == 10 and seqs == list(range(11, 31))
    assert list(zip(writers, tags, strict=True)) == [attribution(_attributed(seq)) for seq in seqs]


def test_retained_ops_say_who_may_have_written_them_without_decoding() -> None:
    records = [_attributed(seq) for seq in range(1, 21)]
    records[3] = {**records[3], "client_id": "not an int"}  # says nothing: decoded to know
    decoded: list[int] = []

    def load(i: int) -> dict[str, Any]:
        decoded.append(i)
        return records[i]

    told = [attribution(record) for record in records]
    held = Retained([r["seq"] for r in records], [c for c, _ in told], [t for _, t in told], load)
    assert told[3] == (0, 0)
    assert held.may_be_by(None, None) == list(range(20))
    assert held.may_be_by(1, None) == [i for i in range(20) if i == 3 or (i + 1) % 3 == 1]
    # seq 5, 15 have origin agent:1 (client 2, 0), seq 10, 20 agent:0.
    assert [held.seqs[i] for i in held.may_be_by(None, "agent:1")] == [4, 5, 15]
    assert [held.seqs[i] for i in held.may_be_by(0, "agent:1")] == [4, 15]
    assert [held.seqs[i] for i in held.may_be_reverts()] == [4, 10]
    kinds = held.kinds()
    assert kinds[0] == text_key("insert") and kinds[1] == text_key("delete") and kinds[3] == 0
    assert decoded == [] and held.encodings() is None
    assert held.record(7) is records[7] and held.record(7) is records[7] and decoded == [7]
    again = Retained.of(records)
    assert again.seqs == held.seqs and again.tags == held.tags and again.record(3) is records[3]


def test_frames_near_each_other_are_read_together_and_checked_when_decoded(
    tmp_path: Path,
) -> None:
    log = HistoryFiles(str(tmp_path), segment_bytes=READ_SPAN * 3)
    log.open()
    positions = []
    records = []
    for i in range(300):
        record = {"kind": "op", "seq": i, "pad": "x" * (10 if i % 7 else 3000)}
        data = frame(i, msgpack.packb(record))
        if i == 150:
            gap = READ_GAP + 1  # the frames after it: another read
            log.write(log.plan(gap, 0), b"\0" * gap)
        pos = log.plan(len(data), 1)
        log.write(pos, data)
        positions.append(pos)
        records.append(record)
    # The last frame's body lies past the span its header is in.
    frames = log.read_raw(positions)
    assert len(frames.spans) == 2 and len(frames) == 300
    assert [frames.decode(i) for i in range(300)] == records
    assert [msgpack.unpackb(body) for body in frames.bodies()] == records
    # Any order, as asked; and the old one-by-one read gives the same.
    shuffled = positions[::-1][:50] + positions[:10]
    assert log.read(shuffled) == records[::-1][:50] + records[:10]
    assert log.read([]) == []
    # A damaged frame fails its check when decoded, the others do not.
    number, offset = split(positions[20])
    with open(tmp_path / f"{number:020d}.hist", "r+b") as f:
        f.seek(offset + HEADER_SIZE + 2)
        f.write(b"#")
    frames = log.read_raw(positions)
    assert frames.decode(19) == records[19] and frames.decode(21) == records[21]
    with pytest.raises(OSError, match="damaged"):
        frames.decode(20)
    with pytest.raises(OSError, match="damaged"):
        frames.bodies()
    with pytest.raises(OSError, match="damaged"):
        log.read(positions[15:25])
    log.close()
