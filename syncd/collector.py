"""The cyclic garbage collector's settings for a serving process.

CPython collects its youngest generation after every 700 container objects
allocated and not yet freed. A request in flight holds a dozen of them (the
request and its headers, the op and its record, a future, a callback), so
with fifty connections waiting on a group commit a young collection ran
every ~50 requests, walked every object in flight, and promoted them all to
be walked again by the older generations, though they die by reference
counting moments later: about a tenth of an op's CPU
(``perf.studies.http_path``), and the full collections that followed walked
every module, class and function loaded at start-up (12 ms each).

So once the server has started: collect, freeze what is alive (start-up's
objects leave the collector's view for good; freed by reference counting as
usual if they ever go), and collect the young generation less often.
Garbage in reference cycles, which the server seldom makes, waits longer:
at most :data:`YOUNG_THRESHOLD` objects' worth.
"""

from __future__ import annotations

import gc
from typing import Final

YOUNG_THRESHOLD: Final = 5_000
"""Container objects allocated (net of those freed) between young
collections: several times what the requests in flight hold. 5,000 measured
the same as 20,000 and 100,000 (perf.studies.http_path --connections 50),
and at 20,000 the cyclic garbage waiting for a collection let a server
taking large writes grow by 37 MiB (tests/limits/test_slow_clients.py,
whose bound is 16 MiB)."""


def settle_after_start() -> None:
    """Collect and freeze start-up's objects; collect the young generation
    every :data:`YOUNG_THRESHOLD` allocations (the older ones as before)."""
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, oldest)
