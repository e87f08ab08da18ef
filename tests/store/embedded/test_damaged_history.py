"""A history record damaged on disk (after it was written whole: a crash does
not do this) is answered 503 with a clear error wherever it is read, not 500;
the server stays up and the other CRDTs are served."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest

from syncd.errors import StoreUnavailable
from syncd.store.embedded.log import HEADER, LENGTH_MASK
from syncd.store.embedded.store import FileStore
from syncd.store.embedded.verify import verify
from tests.conftest import ADMIN
from tests.store.embedded.test_hint import NS, Writer

AUTH = {"authorization": f"Bearer {ADMIN}"}
CRDTS = "/v1/namespaces/n/crdts"


def flip_in_op_of(history: Path, crdt_id: str, seq: int) -> None:
    """Flip a byte in the body of the history's frame of op ``seq`` of ``crdt_id``."""
    for segment in sorted(history.glob("*.hist")):
        data = bytearray(segment.read_bytes())
        off = 0
        while off + HEADER.size <= len(data):
            word, _, _ = HEADER.unpack_from(data, off)
            end = off + HEADER.size + (word & LENGTH_MASK)
            record = msgpack.unpackb(bytes(data[off + HEADER.size : end]), strict_map_key=False)
            if record.get("id") == crdt_id and record.get("seq") == seq:
                data[end - 1] ^= 0x40
                segment.write_bytes(bytes(data))
                return
            off = end
    raise AssertionError(f"no frame of {crdt_id} seq {seq}")


async def test_a_damaged_history_record_is_503_not_500(spawn_server: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = {"SERVICE_FSYNC": "batch", "SERVICE_DATA_DIR": str(data_dir)}
    server = spawn_server(env)
    async with httpx.AsyncClient(base_url=server.url, timeout=5, headers=AUTH) as client:
        for crdt in ("gc:x", "gc:y"):
            for _ in range(5):
                r = await client.post(f"{CRDTS}/{crdt}/ops", json={"op": "increment"})
                assert r.status_code == 200
    assert server.terminate() == 0
    flip_in_op_of(data_dir / "history", "gc:x", 3)

    server = spawn_server(env)
    async with httpx.AsyncClient(base_url=server.url, timeout=5, headers=AUTH) as client:
        for method, path, body in (
            ("GET", f"{CRDTS}/gc:x", None),
            ("GET", f"{CRDTS}/gc:x?at=4", None),
            ("GET", f"{CRDTS}/gc:x/history", None),
            ("POST", f"{CRDTS}/gc:x/ops", {"op": "increment"}),
        ):
            r = await client.request(method, path, json=body)
            assert r.status_code == 503, (path, r.status_code, r.text)
            assert r.json()["error"] == "unavailable" and "damaged" in r.json()["message"]
        r = await client.get(f"{CRDTS}/gc:y")
        assert r.status_code == 200 and r.json()["value"] == 5
        r = await client.post(f"{CRDTS}/gc:y/ops", json={"op": "increment"})
        assert r.status_code == 200 and r.json()["seq"] == 6
    assert server.terminate() == 0
    assert "a history record in" in server.log() and "is damaged" in server.log()
    assert "unhandled error" not in server.log()


async def test_a_replay_over_a_damaged_record_falls_back_to_the_state(tmp_path: Path) -> None:
    """``ops_since`` (a subscriber's catch-up) over a damaged record answers
    None, as for ops no longer retained: the caller sends the whole state."""
    data_dir = tmp_path / "data"
    store = FileStore(data_dir)
    await store.open()
    writer = Writer(store)
    for _ in range(5):
        await writer.op("gc:x", {"op": "increment"})
    await store.close()
    flip_in_op_of(data_dir / "history", "gc:x", 3)
    store = FileStore(data_dir)
    await store.open()
    try:
        life = store._history.index.get(NS, "gc:x")
        assert life is not None
        assert await store.ops_since(NS, "gc:x", life.epoch, 4) is not None  # past the damage
        assert await store.ops_since(NS, "gc:x", life.epoch, 1) is None
        with pytest.raises(StoreUnavailable):
            await store.load(NS, "gc:x")
    finally:
        await store.close()


async def _written_then_compacted(data_dir: Path, compact: bool) -> None:
    """Ops of gc:a, gc:b and gc:c, interleaved, then more CRDTs; with
    ``compact``, a snapshot (of no CRDT: the history is where they are read
    back from) and the log cut behind it, so the log no longer holds the
    first ops. A clean stop, its key directory table removed: the next start
    reads every history frame."""
    store = FileStore(data_dir, segment_bytes=512)
    await store.open()
    writer = Writer(store)
    for _ in range(5):
        for crdt in ("gc:a", "gc:b", "gc:c"):
            await writer.op(crdt, {"op": "increment"})
    for i in range(20):
        await writer.op(f"gc:f{i}", {"op": "increment"})
    if compact:
        await store.compact_now()
    await store.close()
    (data_dir / "history" / "index.hint").unlink()


async def test_damage_inside_the_last_history_segment_keeps_the_frames_after_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A flipped byte in the middle of the last history segment (bit rot in
    fsynced data, not a torn tail) was cut as a torn tail, and every good
    frame after it with it: ops of other CRDTs, acknowledged, silently gone
    once the log no longer held them. The frames after the damage are kept;
    the damaged op's CRDT answers 503 as for any damaged record."""
    data_dir = tmp_path / "data"
    await _written_then_compacted(data_dir, compact=True)
    (segment,) = (data_dir / "history").glob("*.hist")
    size = segment.stat().st_size
    flip_in_op_of(data_dir / "history", "gc:a", 3)
    for start in range(2):  # and again, from the table the first start's stop wrote
        caplog.clear()
        store = FileStore(data_dir, segment_bytes=512)
        await store.open()
        try:
            writer = Writer(store)
            assert segment.stat().st_size == size  # nothing cut
            for crdt in ("gc:b", "gc:c"):
                assert await writer.value(crdt) == (5, 5)
            assert await writer.value("gc:f19") == (1, 1)
            with pytest.raises(StoreUnavailable, match="damaged"):
                await store.load(NS, "gc:a")
            life = store._history.index.get(NS, "gc:a")
            assert life is not None and life.latest == 5
            entry, ops = await store.history_base(NS, "gc:a", life.epoch, 5, 2)
            assert entry is None and [op["seq"] for op in ops] == [1, 2]  # before the damage
            with pytest.raises(StoreUnavailable, match="damaged"):
                await store.history_base(NS, "gc:a", life.epoch, 5, 4)
        finally:
            await store.close()
        damage = [r.message for r in caplog.records if "damaged from offset" in r.message]
        assert len(damage) == (1 if start == 0 else 0), damage  # the table covers it next time
    report = verify(str(data_dir))
    assert [p for p in report.problems if "damaged from offset" in p], report.text()


async def test_damage_the_log_still_holds_is_appended_again(tmp_path: Path) -> None:
    """The same damage while the log still holds the damaged record: it is
    appended again from the log, and the CRDT is whole."""
    data_dir = tmp_path / "data"
    await _written_then_compacted(data_dir, compact=False)
    flip_in_op_of(data_dir / "history", "gc:a", 3)
    store = FileStore(data_dir, segment_bytes=512)
    await store.open()
    try:
        writer = Writer(store)
        for crdt in ("gc:a", "gc:b", "gc:c"):
            assert await writer.value(crdt) == (5, 5)
        life = store._history.index.get(NS, "gc:a")
        assert life is not None
        entry, ops = await store.history_base(NS, "gc:a", life.epoch, 5, 4)
        assert entry is None and [op["seq"] for op in ops] == [1, 2, 3, 4]
    finally:
        await store.close()
