"""The broadcast flusher's duty cycle, on a real loop."""

from __future__ import annotations

import asyncio
import time

import pytest

from syncd.ws.flusher import Flusher


class Target:
    def __init__(self, loop: asyncio.AbstractEventLoop, cost_s: float = 0.0) -> None:
        self.loop = loop
        self.cost_s = cost_s
        self.flushes: list[float] = []

    def flush(self) -> None:
        self.flushes.append(time.perf_counter())
        end = time.perf_counter() + self.cost_s
        while time.perf_counter() < end:
            pass  # a flush that costs this much CPU


async def _until(predicate: object, timeout: float = 2.0) -> None:
    deadline = time.perf_counter() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.perf_counter() < deadline, "not flushed in time"
        await asyncio.sleep(0.001)


async def test_cheap_flushes_happen_on_the_next_loop_pass() -> None:
    loop = asyncio.get_running_loop()
    flusher, a, b = Flusher(), Target(loop), Target(loop)
    for _ in range(3):
        flusher.mark(a)
        flusher.mark(b)
        await asyncio.sleep(0)  # our resume is queued behind the flush
        assert flusher.pending == 0
    assert (len(a.flushes), len(b.flushes)) == (3, 3)


async def test_costly_flushes_are_spaced_by_the_duty_cycle() -> None:
    loop = asyncio.get_running_loop()
    flusher = Flusher(share=0.5, max_gap=1.0)
    slow = Target(loop, cost_s=0.02)
    flusher.mark(slow)
    await _until(lambda: len(slow.flushes) == 1)
    marked = time.perf_counter()
    flusher.mark(slow)
    await asyncio.sleep(0)
    assert len(slow.flushes) == 1  # not yet: the last flush took 20 ms
    await _until(lambda: len(slow.flushes) == 2)
    # At half the loop's time, the gap after a 20 ms flush is 20 ms.
    assert slow.flushes[1] - slow.flushes[0] >= 0.035
    assert slow.flushes[1] >= marked


async def test_the_gap_is_capped() -> None:
    loop = asyncio.get_running_loop()
    flusher = Flusher(share=0.01, max_gap=0.01)  # uncapped, the gap would be 99x
    slow = Target(loop, cost_s=0.02)
    flusher.mark(slow)
    await _until(lambda: len(slow.flushes) == 1)
    flusher.mark(slow)
    await _until(lambda: len(slow.flushes) == 2, timeout=0.5)


def test_bad_parameters() -> None:
    with pytest.raises(ValueError):
        Flusher(share=0)
    with pytest.raises(ValueError):
        Flusher(max_gap=-1)


async def test_a_long_round_yields_to_the_loop_between_slices() -> None:
    loop = asyncio.get_running_loop()
    flusher = Flusher(share=1.0, max_gap=0.0, slice_s=0.002)
    # The clock is read every 16 targets: a slice here is 16 targets, 8 ms.
    targets = [Target(loop, cost_s=0.0005) for _ in range(128)]
    ticks: list[float] = []

    def tick() -> None:
        ticks.append(time.perf_counter())
        if len(ticks) < 10_000:
            loop.call_soon(tick)

    for target in targets:
        flusher.mark(target)
    loop.call_soon(tick)
    await _until(lambda: all(t.flushes for t in targets))
    first = targets[0].flushes[0]
    last = targets[-1].flushes[0]
    # Other callbacks ran while the round was under way (8 slices, 7 passes
    # between them), not only once it was done.
    assert len([t for t in ticks if first < t < last]) >= 5
    assert all(len(t.flushes) == 1 for t in targets)
    assert flusher.pending == 0


async def test_marks_during_a_round_go_to_the_next_round() -> None:
    loop = asyncio.get_running_loop()
    flusher = Flusher(share=1.0, max_gap=0.0, slice_s=0.001)
    targets = [Target(loop, cost_s=0.0005) for _ in range(40)]
    for target in targets:
        flusher.mark(target)
    await asyncio.sleep(0)  # the first slice has run: the round is under way
    assert 0 < flusher.pending < 40
    flusher.mark(targets[0])  # flushed already this round: again in the next
    await _until(lambda: flusher.pending == 0 and len(targets[0].flushes) == 2)
    assert [len(t.flushes) for t in targets[1:]] == [1] * 39


class Failing:
    def __init__(self) -> None:
        self.calls = 0

    def flush(self) -> None:
        self.calls += 1
        raise RuntimeError("a broken target")


async def test_a_target_that_raises_does_not_stop_the_flusher() -> None:
    loop = asyncio.get_running_loop()
    errors: list[object] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context.get("exception")))
    try:
        flusher = Flusher()
        bad, good = Failing(), Target(loop)
        flusher.mark(bad)
        flusher.mark(good)
        await _until(lambda: len(good.flushes) == 1)
        flusher.mark(good)  # and later rounds still happen
        await _until(lambda: len(good.flushes) == 2)
        assert bad.calls == 1 and len(errors) == 1
    finally:
        loop.set_exception_handler(None)
