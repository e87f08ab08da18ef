"""A failed write of the history files (a real full tmpfs: the log writes into
its runway, the history's next page does not fit) switched the history off
until the next start: writes stayed refused (503, not ready) even once the
disk took writes again. The store now reads the history back from the log
while it runs, once a probe write succeeds: writes resume by themselves, and
the history, ``ops_since``, compaction and a backup hold every acknowledged
op once (none lost, none doubled), before and after a restart."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from syncd.app import App
from syncd.errors import ApiError
from syncd.server import Server
from syncd.store.embedded.store import FileStore
from syncd.store.history_index import Retention
from tests.conftest import RunningServer, base_settings
from tests.http.support import issue, op
from tests.store.embedded.test_failures import small_tmpfs, wait_until
from tests.store.embedded.test_full_disk import OPTIONS as FULL_DISK_OPTIONS
from tests.store.embedded.test_full_disk import fill
from tests.store.embedded.test_hint import NS, Writer

OPTIONS: dict[str, Any] = {
    "probe_interval": 0.02,
    "history_segment_bytes": 8 * 1024,
    "history_retention": Retention.parse("20ops"),
    "replay_tail_per_crdt": 1000,
}
BASE = "/v1/namespaces/app/crdts"


def crdt(i: int) -> str:
    """A set of large elements (checkpoints often, so retention frees segments)
    every other op, counters in between (their ops keep those segments in use)."""
    return "or:big" if i % 2 else f"gc:{i // 2 % 3}"


async def write(writer: Writer, acked: Counter[str], i: int) -> None:
    crdt_id = crdt(i)
    if crdt_id == "or:big":
        await writer.op(crdt_id, {"op": "add", "element": f"{acked[crdt_id]}-" + "x" * 1000})
    else:
        await writer.op(crdt_id, {"op": "increment"})
    acked[crdt_id] += 1


async def write_until_the_history_fails(
    store: FileStore, writer: Writer, acked: Counter[str]
) -> None:
    """Write on a full disk until the store stops being ready: the log's writes
    go into its runway (acknowledged), the history's next page does not fit."""
    i = 0
    while store.ready:
        assert i < 5000, "the history never failed"
        await write(writer, acked, i)
        i += 1


async def check(store: FileStore, acked: Counter[str]) -> None:
    """Every CRDT loads with each acknowledged op once, its history pages and
    ``ops_since`` give its last ops once each, in a row."""
    writer = Writer(store)
    for crdt_id, count in acked.items():
        value, seq = await writer.value(crdt_id)
        assert seq == count, crdt_id
        assert (len(value) if crdt_id == "or:big" else value) == count, crdt_id
        life = store._history.index.get(NS, crdt_id)
        assert life is not None and life.latest == count
        records, _ = await store.history(NS, crdt_id, life.epoch, life.latest, None, 1000)
        seqs = sorted(r["seq"] for r in records)
        assert seqs == list(range(seqs[0], count + 1)), crdt_id  # none doubled, none missing
        assert len(seqs) >= 20
        tail = await store.ops_since(NS, crdt_id, life.epoch, count - 10)
        assert tail is not None and [r["seq"] for r in tail] == list(range(count - 9, count + 1))


async def test_a_failed_history_write_is_read_back_from_the_log_without_a_restart(
    tmp_path: Path,
) -> None:
    with small_tmpfs(tmp_path / "mnt", "8m") as mnt:
        data = mnt / "data"
        store = FileStore(data, **OPTIONS)
        await store.open()
        acked: Counter[str] = Counter()
        try:
            writer = Writer(store)
            for i in range(100):
                await write(writer, acked, i)
            filler = mnt / "filler"
            fill(filler)
            # The log's writes go into its runway (written ahead): acknowledged;
            # the history's next page does not fit, and switches it off.
            await write_until_the_history_fails(store, writer, acked)
            with pytest.raises(ApiError) as refused:
                await store.append([])
            assert refused.value.status == 503
            assert refused.value.message == (
                "storage is recovering from a write failure: No space left on device"
            )
            await asyncio.sleep(0.1)
            assert not store.ready  # the probes fail while the disk is full
            filler.unlink()
            await wait_until(lambda: store.ready)  # no restart
            reread = set(store._history.files.numbers())
            for i in range(300):
                await write(writer, acked, i)
            await check(store, acked)
            await store.compact_history()
            # Retention deleted segments the re-read history had indexed.
            assert reread - set(store._history.files.numbers())
            await check(store, acked)
            await store.backup(str(tmp_path / "copy"))
        finally:
            await store.close()
        for directory in (data, data, tmp_path / "copy"):  # a restart, then one reading the hint
            again = FileStore(directory, **OPTIONS)
            await again.open()
            try:
                assert again.ready
                await check(again, acked)
            finally:
                await again.close()


async def test_a_server_takes_writes_again_once_its_full_disk_has_room(tmp_path: Path) -> None:
    """The same on a real server: the op whose history write failed is
    acknowledged, the next ones answer 503 and /health/ready 503; once the
    disk has room again both answer 200 with no restart, and the CRDT's
    history holds every acknowledged op once."""
    with small_tmpfs(tmp_path / "mnt", "8m") as mnt:
        config = base_settings(mnt / "data", fsync="batch")
        server = Server(config, App(config, store_options={"probe_interval": 0.02}))
        await server.start()
        try:
            async with httpx.AsyncClient(base_url=RunningServer(server).url) as client:
                h = await issue(client)
                acked = 0
                for _ in range(20):
                    assert (await op(client, h, "gc:a", {"op": "increment"})).status_code == 200
                    acked += 1
                filler = mnt / "filler"
                fill(filler)
                for _ in range(5000):
                    r = await op(client, h, "gc:a", {"op": "increment"})
                    if r.status_code != 200:
                        break
                    acked += 1
                assert r.status_code == 503, r.text
                assert (await client.get("/health/ready")).status_code == 503
                filler.unlink()
                deadline = asyncio.get_running_loop().time() + 5
                while (await client.get("/health/ready")).status_code != 200:
                    assert asyncio.get_running_loop().time() < deadline, "never ready again"
                    await asyncio.sleep(0.02)
                for _ in range(10):
                    assert (await op(client, h, "gc:a", {"op": "increment"})).status_code == 200
                    acked += 1
                r = await client.get(f"{BASE}/gc:a", headers=h)
                assert (r.json()["value"], r.json()["seq"]) == (acked, acked)
                r = await client.get(f"{BASE}/gc:a/history?limit=1000", headers=h)
                assert r.status_code == 200, r.text
                assert [o["seq"] for o in r.json()["ops"]] == list(range(acked, 0, -1))
        finally:
            await server.shutdown()


async def test_a_history_compaction_that_failed_part_way_is_read_back_too(tmp_path: Path) -> None:
    """A full disk under the copy of a sparse segment's live frames leaves part
    of a copy in the history's active segment (test_full_disk.py): the history
    read back from the log skips it, and every acknowledged op is there, once,
    before and after a restart."""
    options: dict[str, Any] = {**FULL_DISK_OPTIONS, "probe_interval": 0.02}
    with small_tmpfs(tmp_path / "mnt") as mnt:
        data = mnt / "data"
        store = FileStore(data, **options)
        await store.open()
        acked: Counter[str] = Counter()
        try:
            writer = Writer(store)
            store._history._grown = -(1 << 40)  # no compaction but the test's
            for i in range(80):
                await write(writer, acked, i)
            filler = mnt / "filler"
            fill(filler)
            with pytest.raises(OSError):
                await store.compact_history()
            assert not store.ready
            filler.unlink()
            await wait_until(lambda: store.ready)
            for i in range(20):
                await write(writer, acked, i)
            for crdt_id, count in acked.items():
                value, seq = await Writer(store).value(crdt_id)
                assert seq == count and (len(value) if crdt_id == "or:big" else value) == count
        finally:
            store._release()  # the process dies: no table, nothing flushed
        again = FileStore(data, **options)
        await again.open()
        try:
            for crdt_id, count in acked.items():
                value, seq = await Writer(again).value(crdt_id)
                assert seq == count and (len(value) if crdt_id == "or:big" else value) == count
        finally:
            await again.close()
