"""The collector's settings a serving process takes once started (syncd/collector.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from syncd.collector import YOUNG_THRESHOLD, settle_after_start


@pytest.fixture
def restored() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_start_up_objects_are_frozen_and_young_collections_are_rarer(restored: None) -> None:
    alive = object()
    holder = [alive]  # a container the collector tracks
    middle, oldest = gc.get_threshold()[1:]
    settle_after_start()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, oldest)
    assert gc.get_freeze_count() > 0
    assert not any(o is holder for o in gc.get_objects())  # out of the collector's view
    # Cyclic garbage made after start is still collected.
    collected_before = gc.get_stats()[2]["collected"]
    cycle: list[object] = []
    cycle.append(cycle)
    del cycle
    assert gc.collect() >= 1
    assert gc.get_stats()[2]["collected"] > collected_before
