"""``syncd verify`` on the data directory of a running store: a compaction
that deletes a snapshot, a log segment or a history segment between verify's
listing of a directory and its read of the file is no damage (seen as
"problem: .../history/...hist: No such file or directory" and "history: 0
files" on a live server). The store here is real and so is its compaction;
the hook only runs it at the one moment the race needs: just before verify
opens the file it listed."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from syncd.store.embedded import recovery
from syncd.store.embedded import verify as verify_module
from syncd.store.embedded.history_files import HistoryFiles
from syncd.store.embedded.store import FileStore
from syncd.store.history_index import Retention
from tests.store.embedded.test_hint import Writer

SMALL = {
    "segment_bytes": 512,  # many log segments, the older ones covered by the next snapshot
    "snapshot_every_bytes": 1 << 30,  # snapshots only when the test takes one
    "history_segment_bytes": 1024,  # many history segments, the older ones all dead
    "history_retention": Retention(ops=5),
}

OPS = 150
"""Twice: past the history's first checkpoint, which retention trims up to."""


async def _store_with_work_to_compact(data: Path) -> tuple[FileStore, Writer]:
    store = FileStore(data, **SMALL)  # type: ignore[arg-type]
    await store.open()
    writer = Writer(store)
    # Past the first checkpoint (every ~16 KiB of ops): retention trims up to it.
    for _ in range(OPS):
        await writer.op("gc:x", {"op": "increment"})
    await store.compact_now()
    for _ in range(OPS):
        await writer.op("gc:x", {"op": "increment"})
    return store, writer


def _compacting_before_first_read(
    loop: asyncio.AbstractEventLoop,
    compact: Callable[[], Awaitable[int]],
    real: Callable[..., Any],
    path_of: Callable[..., str],
) -> Callable[..., Any]:
    """``real``, but its first call runs the store's compaction first (on the
    store's loop, verify waiting as it would on a busy server) and checks
    that the file it was given is gone."""
    fired: list[str] = []

    def hooked(*args: Any, **kwargs: Any) -> Any:
        if not fired:
            path = path_of(*args)
            fired.append(path)
            asyncio.run_coroutine_threadsafe(compact(), loop).result(timeout=30)
            assert not os.path.exists(path), "the compaction did not remove the file verify read"
        return real(*args, **kwargs)

    hooked.fired = fired  # type: ignore[attr-defined]
    return hooked


@pytest.mark.parametrize("target", ["snapshot", "log segment", "history segment"])
async def test_file_compacted_away_while_verify_reads_is_no_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    data = tmp_path / "data"
    store, writer = await _store_with_work_to_compact(data)

    async def write_on_and_compact_history() -> int:
        # Past the next checkpoint: the segments before it are all dead.
        for _ in range(OPS):
            await writer.op("gc:x", {"op": "increment"})
        return await store.compact_history()

    loop = asyncio.get_running_loop()
    try:
        if target == "snapshot":
            hook = _compacting_before_first_read(
                loop, store.compact_now, verify_module.read_snapshot, lambda path, lsn: path
            )
            monkeypatch.setattr(verify_module, "read_snapshot", hook)
        elif target == "log segment":
            hook = _compacting_before_first_read(
                loop, store.compact_now, recovery.check_segment, lambda path, *rest: path
            )
            monkeypatch.setattr(recovery, "check_segment", hook)
        else:
            hook = _compacting_before_first_read(
                loop,
                write_on_and_compact_history,
                HistoryFiles._scan,
                lambda files, number, *rest: files._path(number),
            )
            monkeypatch.setattr(HistoryFiles, "_scan", hook)
        report = await asyncio.to_thread(verify_module.verify, str(data))
    finally:
        await store.close()
    assert hook.fired, f"verify read no {target}"  # type: ignore[attr-defined]
    assert report.ok, report.text()
    assert report.history_files > 0, report.text()


async def _damaged_snapshot(data: Path) -> Path:
    """A stopped store's directory whose snapshot has a byte flipped: real damage."""
    store = FileStore(data)
    await store.open()
    writer = Writer(store)
    for _ in range(3):
        await writer.op("gc:x", {"op": "increment"})
    await store.compact_now()
    await store.close()
    (snapshot,) = (data / "snapshots").iterdir()
    raw = bytearray(snapshot.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    snapshot.write_bytes(bytes(raw))
    return snapshot


def _changing_the_log_directory(
    monkeypatch: pytest.MonkeyPatch, data: Path, passes_changed: int
) -> list[int]:
    """Each of the first ``passes_changed`` passes adds a file to ``log/`` as
    it reads the snapshot (a file no read takes for a segment, as a running
    server's changes are to verify); the passes counted."""
    passes: list[int] = []
    real = verify_module.read_snapshot

    def hooked(path: str, lsn: int) -> Any:
        passes.append(lsn)
        if len(passes) <= passes_changed:
            (data / "log" / f"changed-{len(passes)}").write_bytes(b"")
        return real(path, lsn)

    monkeypatch.setattr(verify_module, "read_snapshot", hooked)
    return passes


async def test_damage_found_again_once_the_directory_holds_still_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    snapshot = await _damaged_snapshot(data)
    passes = _changing_the_log_directory(monkeypatch, data, passes_changed=1)
    report = verify_module.verify(str(data))
    assert len(passes) == 2  # read again once, then the directory held still
    assert not report.ok and any(str(snapshot) in p for p in report.problems), report.text()
    assert not report.notes, report.text()


async def test_damage_in_a_directory_changing_under_every_read_is_reported_with_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    snapshot = await _damaged_snapshot(data)
    passes = _changing_the_log_directory(monkeypatch, data, passes_changed=1 << 30)
    report = verify_module.verify(str(data))
    assert len(passes) == verify_module.MAX_PASSES
    assert not report.ok and any(str(snapshot) in p for p in report.problems), report.text()
    assert any("changed while each of" in n for n in report.notes), report.text()


async def test_damage_in_a_directory_holding_still_is_read_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    await _damaged_snapshot(data)
    passes = _changing_the_log_directory(monkeypatch, data, passes_changed=0)
    report = verify_module.verify(str(data))
    assert len(passes) == 1 and not report.ok, report.text()


async def test_a_snapshot_without_crdt_states_says_where_they_are(tmp_path: Path) -> None:
    """The store loads CRDTs from the history files on demand: its snapshots
    carry none (a server's, as the writer's here), which "(0 CRDTs)" read as
    CRDTs lost."""
    data = tmp_path / "data"
    store = FileStore(data)
    await store.open()
    writer = Writer(store)
    await writer.op("gc:x", {"op": "increment"})
    await store.compact_now()
    await store.close()
    report = verify_module.verify(str(data))
    assert report.ok, report.text()
    assert "snapshot: at log sequence 1 (carries no CRDT state: " in report.text()
    assert "0 CRDTs" not in report.text()
