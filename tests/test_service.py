"""The op path's two kinds of failure on a local store (syncd/service.py).

A refused op (an ``ApiError`` from the engine's checks in ``apply()``) wrote
nothing: the service stays writable. A ``StoreUnavailable`` from the store
means memory holds records the log does not: the service refuses writes
until the store takes them again and the state is rebuilt from disk. The
store is a real FileStore whose files fail on demand (tests/store/support.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from syncd.app import App
from syncd.auth import ROOT
from syncd.errors import ApiError, StoreUnavailable
from syncd.store.embedded import commit as group_commit
from tests.conftest import base_settings
from tests.store.support import ENOSPC, Faults, faulty_opener

NS = "n"
WAIT_S = 5.0


async def eventually(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


@pytest.fixture
async def faulty_app(tmp_path: Path) -> AsyncIterator[tuple[App, Faults]]:
    faults = Faults()
    app = App(
        base_settings(tmp_path / "data", fsync="batch"),
        store_options={"opener": faulty_opener(faults), "probe_interval": 0.02},
    )
    await app.start()
    yield app, faults
    await app.close()


async def op(app: App, body: Any, crdt_id: str = "gc:a") -> Any:
    return await app.service.apply_ops(NS, crdt_id, body, ROOT, "http")


def value(app: App, crdt_id: str = "gc:a") -> Any:
    read = app.engine.read(NS, crdt_id)
    return None if read is None else read["value"]


async def test_an_op_refused_in_apply_writes_nothing_and_leaves_writes_open(
    faulty_app: tuple[App, Faults],
) -> None:
    app, _ = faulty_app
    await op(app, {"op": "increment", "amount": 2})
    with pytest.raises(ApiError) as refused:
        await op(app, {"op": "increment", "amount": -1})  # checked by the type, in apply()
    assert refused.value.status == 400 and not isinstance(refused.value, StoreUnavailable)
    assert app.service.writable and app.store.wal_last_seq == 1
    assert (await op(app, {"op": "increment"})).seq == 2
    assert value(app) == 3


async def test_a_failed_write_refuses_writes_until_the_state_is_rebuilt_from_disk(
    faulty_app: tuple[App, Faults],
) -> None:
    app, faults = faulty_app
    await op(app, {"op": "increment", "amount": 2})
    faults.write_errno = ENOSPC
    with pytest.raises(StoreUnavailable) as failed:
        await op(app, {"op": "increment", "amount": 100})
    assert failed.value.status == 503
    assert not app.service.writable
    with pytest.raises(ApiError) as refused:
        await op(app, {"op": "increment"})  # refused before the engine: memory is suspect
    assert refused.value.status == 503
    faults.clear()
    await eventually(lambda: app.service.writable)
    await app.service.ensure(NS, "gc:a")
    assert value(app) == 2  # the failed op is not in the rebuilt state
    assert (await op(app, {"op": "increment"})).seq == 2


async def test_a_record_over_the_log_limit_answers_413_and_rebuilds_the_state(
    faulty_app: tuple[App, Faults], monkeypatch: pytest.MonkeyPatch
) -> None:
    app, _ = faulty_app
    await op(app, {"op": "set", "value": "short"}, "lw:t")
    monkeypatch.setattr(group_commit, "MAX_RECORD_BYTES", 300)
    with pytest.raises(StoreUnavailable) as refused:
        await op(app, {"op": "set", "value": "x" * 400}, "lw:t")  # applied, then refused
    assert (refused.value.status, refused.value.code) == (413, "payload_too_large")
    assert not app.service.writable
    await eventually(lambda: app.service.writable)
    await app.service.ensure(NS, "lw:t")
    assert value(app, "lw:t") == "short"
