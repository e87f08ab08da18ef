"""KeyedLocks: one lock per CRDT, handed over first come first served, freed
(and reported free) when nobody holds or waits for it, whatever is cancelled."""

from __future__ import annotations

import asyncio

import pytest

from syncd.store.postgres import Key, KeyedLocks

A: Key = ("ns", "a")
B: Key = ("ns", "b")


def locks_reporting() -> tuple[KeyedLocks, list[Key]]:
    locks = KeyedLocks()
    freed: list[Key] = []
    locks.on_free = freed.append
    return locks, freed


async def test_waiters_get_the_lock_in_the_order_they_asked() -> None:
    locks, freed = locks_reporting()
    order: list[int] = []

    async def take(n: int) -> None:
        async with locks.hold(A):
            order.append(n)
            await asyncio.sleep(0)

    await locks.acquire(A)
    tasks = [asyncio.create_task(take(n)) for n in range(3)]
    await asyncio.sleep(0)
    assert locks.busy(A) and order == []
    locks.release(A)
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2]
    assert not locks.busy(A)
    assert freed == [A]  # once, when the last one let go


async def test_a_cancelled_waiter_is_passed_over() -> None:
    locks, freed = locks_reporting()
    await locks.acquire(A)
    waiting = asyncio.create_task(locks.acquire(A))
    after = asyncio.create_task(locks.acquire(A))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    locks.release(A)
    await after  # the lock went to the next one
    assert locks.busy(A) and freed == []
    locks.release(A)
    assert not locks.busy(A) and freed == [A]


async def test_a_waiter_cancelled_after_it_was_handed_the_lock_lets_it_go() -> None:
    locks, freed = locks_reporting()
    await locks.acquire(A)
    waiting = asyncio.create_task(locks.acquire(A))
    await asyncio.sleep(0)
    locks.release(A)  # handed to `waiting`, which has not run yet
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not locks.busy(A) and freed == [A]


async def test_hold_all_lets_go_of_what_it_took_when_cancelled_part_way() -> None:
    locks, freed = locks_reporting()
    await locks.acquire(B)  # someone else holds the second key
    entered = False

    async def batch() -> None:
        nonlocal entered
        async with locks.hold_all([A, B]):
            entered = True

    task = asyncio.create_task(batch())
    await asyncio.sleep(0)
    assert locks.busy(A) and not entered
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not locks.busy(A) and freed == [A]
    locks.release(B)
    assert freed == [A, B]


async def test_hold_all_takes_free_keys_without_waiting_and_frees_them_after() -> None:
    locks, freed = locks_reporting()
    keys = [("ns", f"k{i}") for i in range(14)]
    async with locks.hold_all(keys):
        assert all(locks.busy(k) for k in keys)
    assert not any(locks.busy(k) for k in keys)
    assert freed == keys
