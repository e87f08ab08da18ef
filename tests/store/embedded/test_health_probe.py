"""The embedded store's own check of its disk while idle: every
``health_probe_interval`` in which no record was written it writes and
fsyncs a probe page in the log's directory (syncd.store.embedded.store
HEALTH_PROBE_INTERVAL_S). A disk that fails meanwhile makes the store
unready and refuses writes, as a failed batch does, until a probe succeeds;
while batches reach the disk no probe is written (their fsync is the proof,
and the op path pays nothing for the check)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from syncd.store.embedded.log import PROBE_NAME, LogFile, Opener
from tests.store.conftest import MakeStore
from tests.store.embedded.test_failures import expect_503, wait_until
from tests.store.support import EIO, Faults, faulty_opener, op

INTERVAL_S = 0.1


def counting(opener: Opener, probes: list[str]) -> Opener:
    def open_file(path: str) -> LogFile:
        if os.path.basename(path) == PROBE_NAME:
            probes.append(path)
        return opener(path)

    return open_file


async def test_an_idle_store_finds_a_failed_disk_and_its_recovery(make_store: MakeStore) -> None:
    faults = Faults()
    store, _ = await make_store(
        opener=faulty_opener(faults), probe_interval=0.01, health_probe_interval=INTERVAL_S
    )
    await store.append([op(1)])
    assert store.ready
    faults.fsync_errno = EIO  # the disk fails while nobody writes
    await wait_until(lambda: not store.ready, timeout=INTERVAL_S * 10)
    error = await expect_503(store.append([op(2)]))
    assert "Input/output error" in error.message
    faults.clear()
    await wait_until(lambda: store.ready)
    await store.append([op(2)])
    assert store.wal_last_seq == 2


async def test_no_probe_while_batches_reach_the_disk(make_store: MakeStore, tmp_path: Path) -> None:
    probes: list[str] = []
    store, _ = await make_store(
        opener=counting(LogFile.open, probes), health_probe_interval=INTERVAL_S
    )
    probes.clear()  # the start's own probe
    seq = 0
    loop = asyncio.get_running_loop()
    until = loop.time() + INTERVAL_S * 8
    while loop.time() < until:
        seq += 1
        await store.append([op(seq)])
        await asyncio.sleep(INTERVAL_S / 5)
    assert probes == []
    await asyncio.sleep(INTERVAL_S * 3)  # idle: it probes
    probe = tmp_path / "data" / "log" / PROBE_NAME
    assert probes and set(probes) == {str(probe)}
    # Each probe removes its page: it is gone between probes. (At any one
    # moment a probe may be under way, its page written and not yet removed:
    # on a loaded machine one was, and a single look failed.)
    await wait_until(lambda: not probe.exists())
    assert store.ready
