"""The shared timer wheel, on a real loop and its real clock: entries fire at
the end of their slot (never early, at most a slot late), one loop timer per
slot in use, removal, and a slot of many entries."""

from __future__ import annotations

import asyncio
import math

import pytest

from syncd.http.timers import Wheel

RESOLUTION = 0.05
SLACK_S = 0.05
"""The loop's own lateness a busy test machine may add to a slot's end."""
CLOCK_S = 0.002
"""uvloop's clock and timers count whole milliseconds: a timer may fire a
millisecond before the float it was set for."""


class Entry:
    def __init__(self, name: str) -> None:
        self.name = name


async def test_an_entry_fires_at_the_end_of_its_slot_never_early() -> None:
    loop = asyncio.get_running_loop()
    fired: list[tuple[str, float]] = []
    wheel: Wheel[Entry] = Wheel(RESOLUTION, lambda e: fired.append((e.name, loop.time())))
    when = loop.time() + 0.12
    wheel.add(when, Entry("a"))
    await asyncio.sleep(0.12 + RESOLUTION + SLACK_S)
    ((name, at),) = fired
    assert name == "a"
    assert when - CLOCK_S <= at <= when + RESOLUTION + SLACK_S
    assert len(wheel) == 0


async def test_entries_of_one_slot_share_its_timer_and_fire_together() -> None:
    loop = asyncio.get_running_loop()
    fired: list[tuple[str, float]] = []
    at_pass: list[int] = []
    """The loop pass each entry fired in: uvloop's time() is read afresh at
    each call (to the millisecond), so entries fired in one pass could show
    two times on a loaded machine. A pass is open from the first fire until
    the callbacks scheduled then run (the next step of the loop)."""
    passes = [0]
    open_pass = [False]

    def on_fire(entry: Entry) -> None:
        if not open_pass[0]:
            open_pass[0] = True
            passes[0] += 1
            loop.call_soon(open_pass.__setitem__, 0, False)
        fired.append((entry.name, loop.time()))
        at_pass.append(passes[0])

    resolution = 0.2
    wheel: Wheel[Entry] = Wheel(resolution, on_fire)
    start = (math.floor(loop.time() / resolution) + 1) * resolution  # a slot's start
    slots = [wheel.add(start + 0.02 * i, Entry(str(i))) for i in range(1, 6)]
    assert len({id(s) for s in slots}) == 1  # one slot, so one loop timer
    assert len(wheel) == 5
    slot = slots[0]
    wheel.remove(slot, next(e for e in slot if e.name == "3"))
    await asyncio.sleep(start + resolution - loop.time() + SLACK_S)
    assert sorted(name for name, _ in fired) == ["1", "2", "4", "5"]
    assert len(set(at_pass)) == 1  # one pass of the loop, at the slot's end
    assert fired[0][1] >= start + resolution - CLOCK_S


async def test_removing_the_last_entry_cancels_the_slots_timer() -> None:
    loop = asyncio.get_running_loop()
    fired: list[str] = []
    wheel: Wheel[Entry] = Wheel(RESOLUTION, lambda e: fired.append(e.name))
    a, b = Entry("a"), Entry("b")
    slot = wheel.add(loop.time() + 0.05, a)
    assert wheel.add(loop.time() + 0.05, b) is slot
    wheel.remove(slot, a)
    assert not slot.handle.cancelled()
    wheel.remove(slot, b)
    assert slot.handle.cancelled() and len(wheel) == 0
    wheel.remove(slot, b)  # again: nothing
    await asyncio.sleep(0.05 + RESOLUTION + SLACK_S)
    assert fired == []


async def test_an_entry_may_add_itself_again_and_a_failing_one_costs_the_others_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = asyncio.get_running_loop()
    fired: list[str] = []
    wheel: Wheel[Entry]

    def fire(entry: Entry) -> None:
        fired.append(entry.name)
        if entry.name == "bad":
            raise RuntimeError("boom")
        if fired.count(entry.name) < 3:
            wheel.add(loop.time() + 0.01, entry)  # a periodic timer re-arms from its fire

    wheel = Wheel(0.02, fire)
    for name in ("bad", "x", "y"):
        wheel.add(loop.time() + 0.01, Entry(name))
    await asyncio.sleep(0.3)
    assert fired.count("x") == 3 and fired.count("y") == 3 and fired.count("bad") == 1
    assert "timer callback failed" in caplog.text
    assert len(wheel) == 0


async def test_an_entry_removed_by_another_in_the_same_slot_does_not_fire() -> None:
    loop = asyncio.get_running_loop()
    fired: list[str] = []
    wheel: Wheel[Entry]
    entries = [Entry(str(i)) for i in range(4)]
    slot = None

    def fire(entry: Entry) -> None:
        fired.append(entry.name)
        for other in entries:
            if other is not entry:
                assert slot is not None
                wheel.remove(slot, other)  # e.g. a revocation closing the others

    wheel = Wheel(RESOLUTION, fire)
    for entry in entries:
        slot = wheel.add(loop.time() + 0.01, entry)
    await asyncio.sleep(0.01 + RESOLUTION + SLACK_S)
    assert len(fired) == 1


async def test_a_slot_of_many_entries_fires_each_once() -> None:
    loop = asyncio.get_running_loop()
    fired: list[Entry] = []
    wheel: Wheel[Entry] = Wheel(RESOLUTION, fired.append)
    entries = [Entry(str(i)) for i in range(20_000)]
    when = loop.time() + 0.01
    for entry in entries:
        wheel.add(when, entry)
    await asyncio.sleep(0.01 + RESOLUTION + SLACK_S)
    assert len(fired) == len(entries) and {id(e) for e in fired} == {id(e) for e in entries}


def test_the_resolution_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Wheel(0.0, lambda e: None)
