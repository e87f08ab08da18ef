"""Damage found in the log names what it means where it is found: at
start-up the store refuses to start; found while running (a reload after a
failure, or the history read back from the log) the store goes on refusing
writes, and ``syncd verify`` reports it. Each said "refusing to start",
which told an operator looking at a running server's log that it had
stopped."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncd.store.embedded.log import HEADER, StoreCorruptError
from syncd.store.embedded.recovery import read_only_scan
from syncd.store.embedded.store import FileStore
from tests.store.conftest import MakeStore
from tests.store.embedded.test_hint import Writer


def _damage_first_record(data: Path) -> Path:
    (segment,) = [p for p in (data / "log").glob("*.seg") if p.stat().st_size]
    raw = bytearray(segment.read_bytes())
    raw[HEADER.size + 5] ^= 0x40  # inside the first record, batches after it
    segment.write_bytes(bytes(raw))
    return segment


async def test_damage_found_while_running_does_not_say_refusing_to_start(
    make_store: MakeStore, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    store, _ = await make_store(data, fsync="batch")
    writer = Writer(store)
    for _ in range(3):  # one write batch each
        await writer.op("gc:x", {"op": "increment"})
    segment = _damage_first_record(data)

    with pytest.raises(StoreCorruptError) as running:
        await store.reload()  # what the service does after a failure
    said = str(running.value)
    assert said.startswith(f"{segment}: checksum mismatch at offset 0"), said
    assert "refusing to start" not in said
    assert "goes on refusing writes" in said and "stop syncd" in said, said
    await store.close()

    with pytest.raises(StoreCorruptError) as verifying:
        read_only_scan(str(data))  # syncd verify
    assert "refusing to start" not in str(verifying.value)
    assert "restore the file from a backup" in str(verifying.value)

    with pytest.raises(StoreCorruptError) as starting:
        await FileStore(data).open()
    assert "refusing to start (restore the file from a backup" in str(starting.value)
