"""Shared encodings: one per version of a CRDT and form, kept while a view of
it lives or for the linger after it was last taken, never confused with
another life of the CRDT, and a recent one within its lag."""

from __future__ import annotations

import asyncio
import gc

from syncd.crdt.engine import Entry
from syncd.crdt.ydoc import YDoc
from syncd.shared_states import SHARE_MIN_BYTES, SharedState, SharedStates

BIG = b"s" * SHARE_MIN_BYTES
LINGER_S = 0.2


def _entry(seq: int = 5, epoch: str = "e1") -> Entry:
    return Entry("app", "yd:doc", YDoc.TYPE, YDoc(), seq, epoch)


async def _lingered() -> None:
    await asyncio.sleep(LINGER_S * 3)
    gc.collect()


async def test_one_encoding_per_version_shared_while_a_view_of_it_lives() -> None:
    shared = SharedStates(linger_s=LINGER_S)
    entry = _entry()
    builds: list[int] = []

    def build() -> bytes:
        builds.append(1)
        return BIG

    first = shared.exact(entry, "f", build)
    assert isinstance(first, SharedState) and bytes(first) == BIG
    view = memoryview(first)[10:20]  # what a transport holds
    del first
    await _lingered()
    again = shared.exact(entry, "f", build)
    assert again is view.obj and len(builds) == 1
    assert len(shared) == 1
    del again, view
    await _lingered()
    assert len(shared) == 0  # nobody holds it and it was not taken since: gone
    shared.exact(entry, "f", build)
    assert len(builds) == 2


async def test_it_lingers_after_it_was_last_taken_with_no_view_held() -> None:
    shared = SharedStates(linger_s=LINGER_S)
    entry = _entry()
    shared.exact(entry, "f", lambda: BIG)  # written at once: no view is held
    for _ in range(4):
        await asyncio.sleep(LINGER_S / 2)
        shared.exact(entry, "f", lambda: b"never built")  # taken again: lingers on
    assert len(shared) == 1
    await _lingered()
    assert len(shared) == 0


async def test_a_new_seq_another_epoch_or_another_entry_is_another_version() -> None:
    shared = SharedStates(linger_s=LINGER_S)
    entry = _entry()
    held = shared.exact(entry, "f", lambda: BIG)
    entry.seq += 1
    assert shared.exact(entry, "f", lambda: BIG + b"1") is not held
    other_life = _entry(seq=entry.seq, epoch="e2")
    assert bytes(shared.exact(other_life, "f", lambda: BIG + b"2")).endswith(b"2")
    # Read back after being dropped: same epoch and seq, another entry object.
    reread = _entry(seq=other_life.seq, epoch="e2")
    assert bytes(shared.exact(reread, "f", lambda: BIG + b"3")).endswith(b"3")
    # Forms are apart.
    assert bytes(shared.exact(reread, "g", lambda: BIG + b"4")).endswith(b"4")


async def test_recent_answers_within_its_lag_with_what_was_kept() -> None:
    shared = SharedStates(linger_s=LINGER_S)
    entry = _entry(seq=10)
    held = shared.keep(entry, "f", BIG, b"sv")
    entry.seq = 13
    assert shared.recent(entry, "f", 2) is None
    hit = shared.recent(entry, "f", 3)
    assert hit is not None and hit[0] is held and hit[1:] == (10, b"sv")
    entry.seq = 9  # cannot be: a seq behind the kept one is not taken
    assert shared.recent(entry, "f", 3) is None


async def test_a_small_state_is_not_kept() -> None:
    shared = SharedStates(linger_s=LINGER_S)
    small = b"x" * (SHARE_MIN_BYTES - 1)
    assert shared.keep(_entry(), "f", small) is small
    assert len(shared) == 0


async def test_one_taken_behind_the_current_version_does_not_linger_on() -> None:
    shared = SharedStates(linger_s=LINGER_S)
    entry = _entry(seq=10)
    shared.keep(entry, "f", BIG, b"sv")
    entry.seq = 11
    await asyncio.sleep(LINGER_S / 2)
    assert shared.recent(entry, "f", 5) is not None  # taken, one behind
    await asyncio.sleep(LINGER_S * 0.75)  # past the first linger, not a renewed one
    gc.collect()
    assert shared.recent(entry, "f", 5) is None and len(shared) == 0
