"""The probe files (``.probe`` in ``log/`` and ``history/``: a page written
and fsynced to prove that a failed disk takes data again) never stay behind
a failed probe, and one a killed process left is harmless: ``syncd verify``
and a backup pass it over, and the next start removes it."""

from __future__ import annotations

from pathlib import Path

from syncd.store.embedded.log import PROBE_NAME
from syncd.store.embedded.verify import verify
from tests.store.conftest import MakeStore
from tests.store.embedded.test_failures import NO_AUTO_PROBE, expect_503
from tests.store.support import ENOSPC, Faults, faulty_opener, op, seqs


async def test_a_failed_log_probe_leaves_no_file(make_store: MakeStore, tmp_path: Path) -> None:
    faults = Faults()
    store, _ = await make_store(opener=faulty_opener(faults), probe_interval=NO_AUTO_PROBE)
    await store.append([op(1)])
    faults.write_errno = ENOSPC  # a full disk
    await expect_503(store.append([op(2)]))
    assert not await store.probe()  # its write fails as the batch's did
    assert not (tmp_path / "data" / "log" / PROBE_NAME).exists()
    faults.clear()
    assert await store.probe()
    assert not (tmp_path / "data" / "log" / PROBE_NAME).exists()


async def test_leftover_probes_are_harmless_and_removed_at_start(
    make_store: MakeStore, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    store, _ = await make_store(data)
    await store.append([op(1), op(2)])
    await store.close()
    leftovers = [data / "log" / PROBE_NAME, data / "history" / PROBE_NAME]
    for path in leftovers:  # as a process killed between a probe's write and unlink
        path.write_bytes(b"\0" * 4096)

    report = verify(str(data))
    assert report.ok, report.text()

    store, recovered = await make_store(data)
    assert seqs(recovered.records) == [1, 2]
    assert [path for path in leftovers if path.exists()] == []

    for path in leftovers:  # left while it runs: a backup takes none of them
        path.write_bytes(b"\0" * 4096)
    copy = tmp_path / "copy"
    await store.backup(str(copy))
    assert not list(copy.rglob(PROBE_NAME))
    report = verify(str(copy))
    assert report.ok and report.manifest, report.text()
