"""The embedded store's phases: the table itself, and real FileStores taking its
moves (each store's moves recorded) through open, a failure and its repair, a
reload and close."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncd.errors import ApiError
from syncd.store.embedded.state import TRANSITIONS, IllegalTransition, Phase, StoreState
from syncd.store.embedded.store import FileStore
from tests.store.support import EIO, Faults, faulty_opener, op, seqs

Moves = list[tuple[Phase, Phase]]
NO_AUTO_PROBE = 3600.0  # the probe loop stays asleep unless a test wants it


@pytest.fixture
def moves(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[int, Moves]]:
    """Every move of every store, by store (the StoreState's id)."""
    recorded: dict[int, Moves] = {}
    original = StoreState.to

    def recording(self: StoreState, phase: Phase) -> None:
        before = self.phase
        original(self, phase)
        recorded.setdefault(id(self), []).append((before, phase))

    monkeypatch.setattr(StoreState, "to", recording)
    yield recorded


def path_of(store: FileStore, recorded: dict[int, Moves]) -> list[str]:
    moves = recorded[id(store._state)]
    return [moves[0][0].name] + [after.name for _, after in moves]


async def wait_until(predicate: object, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():  # type: ignore[operator]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.005)


async def refused(awaitable: object) -> str:
    with pytest.raises(ApiError) as err:
        await awaitable  # type: ignore[misc]
    assert err.value.status == 503
    return err.value.message


def test_the_table_allows_exactly_its_moves() -> None:
    for start in Phase:
        for end in Phase:
            state = StoreState()
            state.phase = start
            if end in TRANSITIONS[start]:
                state.to(end)
                assert state.phase is end
            else:
                with pytest.raises(IllegalTransition):
                    state.to(end)
                assert state.phase is start
    fresh = StoreState()
    assert fresh.phase is Phase.NEW and fresh.failure is None
    assert not fresh.suspect and not fresh.told
    assert {p for p in Phase if not TRANSITIONS[p]} == {Phase.CLOSED}
    # Every phase is reachable from NEW, and CLOSED from every phase.
    assert reachable(Phase.NEW) == set(Phase)
    assert all(Phase.CLOSED in reachable(p) for p in Phase)


def reachable(start: Phase) -> set[Phase]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in TRANSITIONS[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


async def test_open_fail_probe_reload_close(tmp_path: Path, moves: dict[int, Moves]) -> None:
    faults = Faults()
    told: list[BaseException] = []
    store = FileStore(
        tmp_path / "data",
        opener=faulty_opener(faults),
        probe_interval=0.01,
        on_failure=told.append,
    )
    state = store._state
    assert store.phase is Phase.NEW and not store.ready
    await store.open()
    assert store.phase is Phase.OPEN and store.ready
    await store.append([op(1)])

    # A failed fsync: the log's failure, a fact of the OPEN phase, not a phase.
    faults.fsync_errno = EIO
    assert "Input/output error" in await refused(store.append([op(2)]))
    assert store.phase is Phase.OPEN and not store.ready
    assert isinstance(state.failure, OSError) and state.suspect and state.told
    assert "Input/output error" in await refused(store.append([op(2)]))
    assert len(told) == 1  # one episode, told once

    # The probe loop repairs the log once the disk takes writes again.
    await asyncio.sleep(0.05)
    assert not store.ready  # its probes fail while the disk does
    faults.clear()
    await wait_until(lambda: store.ready)
    assert state.failure is None and not state.told
    assert state.suspect  # memory stays suspect: no snapshot until reload()

    recovered = await store.reload()
    assert seqs(recovered.records) == [1]
    assert store.phase is Phase.OPEN and store.ready and not state.suspect
    await store.append([op(2)])
    await store.close()
    assert store.phase is Phase.CLOSED and not store.ready
    assert path_of(store, moves) == ["NEW", "OPEN", "RELOADING", "OPEN", "CLOSING", "CLOSED"]
    with pytest.raises(RuntimeError, match="opened once"):
        await store.open()
    await store.close()  # a second close changes nothing
    assert path_of(store, moves)[-1] == "CLOSED"


async def test_a_store_refuses_appends_while_reloading_and_closes_under_a_reload(
    tmp_path: Path, moves: dict[int, Moves]
) -> None:
    store = FileStore(tmp_path / "data", probe_interval=NO_AUTO_PROBE)
    await store.open()
    await store.append([op(1)])
    reloading = asyncio.ensure_future(store.reload())
    await asyncio.sleep(0)  # the reload started: its read is in the I/O thread
    assert store.phase is Phase.RELOADING and not store.ready
    assert "re-reading" in await refused(store.append([op(2)]))
    with pytest.raises(IllegalTransition):  # one reload at a time
        await store.reload()
    await store.close()
    assert seqs((await reloading).records) == [1]  # read before the log closed
    assert path_of(store, moves) == ["NEW", "OPEN", "RELOADING", "CLOSING", "CLOSED"]


async def test_a_store_closed_before_it_opened(tmp_path: Path, moves: dict[int, Moves]) -> None:
    store = FileStore(tmp_path / "data")
    store.lock()
    await store.close()  # releases the lock lock() took
    assert store.phase is Phase.CLOSED
    again = FileStore(tmp_path / "data")
    await again.open()  # the directory is free
    await again.close()
    with pytest.raises(RuntimeError, match="opened once"):
        await store.open()
    assert path_of(store, moves) == ["NEW", "CLOSED"]


async def test_a_batch_drained_by_close_can_fail(tmp_path: Path, moves: dict[int, Moves]) -> None:
    """The failure holds in CLOSING too: close() drains the queue, the last batch
    fails, and the store closes with the failure noted."""
    faults = Faults()
    store = FileStore(tmp_path / "data", opener=faulty_opener(faults), probe_interval=NO_AUTO_PROBE)
    await store.open()
    await store.append([op(1)])
    faults.gate = threading.Event()
    faults.entered.clear()
    writing = asyncio.ensure_future(store.append([op(2)]))
    await wait_until(faults.entered.is_set)  # the batch is in the I/O thread
    closing = asyncio.ensure_future(store.close())
    await asyncio.sleep(0.01)
    assert store.phase is Phase.CLOSING
    faults.fsync_errno = EIO
    faults.gate.set()
    await refused(writing)
    await closing
    assert store.phase is Phase.CLOSED and isinstance(store._state.failure, OSError)
    assert path_of(store, moves) == ["NEW", "OPEN", "CLOSING", "CLOSED"]
    again = FileStore(tmp_path / "data")
    assert seqs((await again.open()).records) == [1]
    await again.close()
