"""Eviction while the store refuses writes (a full disk, an I/O error).

An eviction pass lets CRDTs go only once the store's barrier is durable; while
the store refuses writes that barrier fails, so a pass can free nothing. The
store is a real FileStore whose files fail on demand (tests/store/support.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from syncd.app import App
from syncd.auth import ROOT
from syncd.errors import StoreUnavailable
from tests.conftest import base_settings
from tests.store.support import ENOSPC, Faults, faulty_opener
from tests.ws.support import wait_for

NS = "n"
IDS = [f"gc:c{i}" for i in range(12)]
"""More counters than a 4 KB budget holds (about 800 bytes each)."""


@pytest.fixture
async def small_app(tmp_path: Path) -> AsyncIterator[tuple[App, Faults]]:
    faults = Faults()
    app = App(
        base_settings(tmp_path / "data", fsync="batch", memory_budget_mb=4 / 1024),
        store_options={"opener": faulty_opener(faults), "probe_interval": 0.02},
    )
    await app.start()
    yield app, faults
    await app.close()


async def test_no_eviction_pass_runs_while_the_store_refuses_writes(
    small_app: tuple[App, Faults], caplog: pytest.LogCaptureFixture
) -> None:
    """Each pass's barrier failed, and each logged a stack trace: loads (reads
    of CRDTs that had left memory) started one each, and a pass that had chosen
    CRDTs was retried every ``RETRY_S`` for as long as the disk was full. None
    is started while the store is not ready; once it is, eviction resumes."""
    app, faults = small_app
    service, residency = app.service, app.residency
    for crdt_id in IDS:
        await service.apply_ops(NS, crdt_id, {"op": "increment"}, ROOT, "http")
    await wait_for(lambda: residency._pass is None and len(app.engine) < len(IDS))

    faults.write_errno = ENOSPC
    with pytest.raises(StoreUnavailable):
        await service.apply_ops(NS, IDS[-1], {"op": "increment"}, ROOT, "http")
    await wait_for(lambda: not app.store.ready)
    passes = residency.stats.passes
    caplog.clear()
    for crdt_id in IDS:  # loads past the budget
        assert await service.ensure(NS, crdt_id) is not None
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)
    assert residency.stats.passes == passes
    assert not [r for r in caplog.records if r.name == "syncd.residency"]

    faults.clear()
    await wait_for(lambda: service.writable)
    for crdt_id in IDS:
        await service.apply_ops(NS, crdt_id, {"op": "increment"}, ROOT, "http")
    await wait_for(
        lambda: residency._pass is None and app.engine.resident_bytes <= residency.budget_bytes
    )
    for crdt_id in IDS:
        entry = await service.ensure(NS, crdt_id)
        assert entry is not None and entry.crdt.view(0)["value"] == 2, crdt_id
