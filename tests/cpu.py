"""CPU time of pieces of work compared with each other, on a shared machine."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence


def least_cpu_in_turns(runs: Sequence[Callable[[], object]], rounds: int) -> list[float]:
    """The least CPU time of ``rounds`` runs of each of ``runs``, taken in
    turns: other work on a loaded machine only ever adds to a run, and in
    turns a spell of it (caches, memory bandwidth, on a VM the hypervisor's
    steal) falls on every side alike. This thread's time, not the process's:
    pytest's other threads are no part of it. The heap is frozen meanwhile
    (as syncd/collector.py freezes start-up's): a full collection that a
    run's allocations happen to set off walks every object alive, a large
    fixture's included, which is the heap's cost, not the run's."""
    gc.collect()
    gc.freeze()
    try:
        times: list[list[float]] = [[] for _ in runs]
        for _ in range(rounds):
            for run, taken in zip(runs, times, strict=True):
                started = time.thread_time()
                run()
                taken.append(time.thread_time() - started)
        return [min(taken) for taken in times]
    finally:
        gc.unfreeze()
