"""The store's I/O thread: calls run in order, off the loop, and report back."""

from __future__ import annotations

import asyncio
import threading

import pytest

from syncd.store.embedded.iothread import IoThread


async def test_calls_run_in_order_on_one_other_thread() -> None:
    loop = asyncio.get_running_loop()
    io = IoThread("test-io")
    seen: list[tuple[int, str]] = []

    def job(i: int) -> int:
        seen.append((i, threading.current_thread().name))
        return i * 2

    try:
        futures = [io.run(loop, job, i) for i in range(50)]
        assert await asyncio.gather(*futures) == [i * 2 for i in range(50)]
    finally:
        io.shutdown()
    assert [i for i, _ in seen] == list(range(50))
    assert {name for _, name in seen} == {"test-io"}


async def test_an_exception_reaches_the_awaiting_task_and_the_thread_goes_on() -> None:
    loop = asyncio.get_running_loop()
    io = IoThread("test-io")

    def fail() -> None:
        raise OSError(5, "Input/output error")

    try:
        with pytest.raises(OSError, match="Input/output"):
            await io.run(loop, fail)
        assert await io.run(loop, lambda: "still here") == "still here"
    finally:
        io.shutdown()


async def test_a_cancelled_waiter_does_not_stop_the_thread() -> None:
    loop = asyncio.get_running_loop()
    io = IoThread("test-io")
    gate = threading.Event()
    try:
        blocked = io.run(loop, gate.wait, 5)
        blocked.cancel()
        gate.set()
        assert await io.run(loop, lambda: 1) == 1
    finally:
        io.shutdown()


async def test_shutdown_runs_what_is_queued_then_refuses_more() -> None:
    loop = asyncio.get_running_loop()
    io = IoThread("test-io")
    gate = threading.Event()
    done: list[int] = []
    io.run(loop, gate.wait, 5)
    for i in range(3):
        io.run(loop, done.append, i)
    gate.set()
    io.shutdown()
    assert done == [0, 1, 2]
    with pytest.raises(RuntimeError):
        io.run(loop, done.append, 3)


def test_a_closed_loop_does_not_break_the_thread() -> None:
    loop = asyncio.new_event_loop()
    io = IoThread("test-io")
    gate = threading.Event()
    try:
        io.run(loop, gate.wait, 5)
        loop.close()
        gate.set()  # its answer has no loop to go to: dropped, not raised
        other = asyncio.new_event_loop()
        try:
            assert other.run_until_complete(io.run(other, lambda: 7)) == 7
        finally:
            other.close()
    finally:
        io.shutdown()


async def test_a_result_is_not_kept_once_handed_back() -> None:
    """A large result (a revert's checkpoint) dies with its reader, not when
    the thread's next job comes."""
    import gc
    import weakref

    class Big:
        pass

    loop = asyncio.get_running_loop()
    io = IoThread("test-io")
    try:
        got = await io.run(loop, Big)
        ref = weakref.ref(got)
        await asyncio.sleep(0.05)  # the thread is idle, waiting for a job
        del got
        gc.collect()
        assert ref() is None
    finally:
        io.shutdown()
