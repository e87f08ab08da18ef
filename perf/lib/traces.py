"""Editing traces, and replaying them: through syncd's rga type and through list splicing.

A trace (tests/data/traces, or ``$SYNCD_TRACES``) is gzipped JSON: ``txns``,
each a list of ``patches`` ``[pos, del, ins]``, and the ``endContent`` the
replay must reach. :func:`replay_rga` turns every patch into real ops through
``Rga.apply_op`` (a delete, then an insert, each producing its delta; the op
maps built inside the timed loop, as a client's would be), :func:`replay_list`
splices a plain Python list, the floor any sequence type is compared with.
:func:`memory` replays under tracemalloc (which slows allocation down, so it
is never timed). One OpContext serves every op: the rga type reads only its
``client_id``.

Used by perf.studies.rga_trace (one trace), perf.bench.rga_peers (every trace,
next to pycrdt) and perf.tools.profile (``make profile BENCH=rga-svelte``).
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import time
import tracemalloc
from pathlib import Path

from perf.lib.servers import ROOT
from syncd.crdt.base import OpContext
from syncd.crdt.rga import Rga


def default_traces() -> Path:
    """$SYNCD_TRACES, else the traces in the repository (tests/data/traces)."""
    env = os.environ.get("SYNCD_TRACES")
    return Path(env) if env else ROOT / "tests" / "data" / "traces"


Patch = tuple[int, int, str]


def load_patches(path: str, copies: int) -> tuple[list[Patch], str]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        trace = json.load(fh)
    if trace.get("kind") == "concurrent":
        raise SystemExit("rga_trace: a sequential trace is needed (this one is concurrent)")
    if trace.get("startContent"):
        raise SystemExit("rga_trace: traces with a startContent are not supported")
    one = [(p[0], p[1], p[2]) for txn in trace["txns"] for p in txn["patches"]]
    end: str = trace["endContent"]
    patches: list[Patch] = []
    for copy in range(copies):
        shift = copy * len(end)
        patches.extend((pos + shift, dl, ins) for pos, dl, ins in one)
    return patches, end * copies


def replay_rga(patches: list[Patch]) -> tuple[float, Rga]:
    rga = Rga.new()
    ctx = OpContext(client_id=1, now_ms=0, seq=0)
    apply_op = rga.apply_op
    start = time.perf_counter()
    for pos, dl, ins in patches:
        if dl:
            apply_op({"op": "delete", "index": pos, "count": dl}, ctx)
        if ins:
            apply_op({"op": "insert", "index": pos, "text": ins}, ctx)
    return time.perf_counter() - start, rga


def replay_list(patches: list[Patch]) -> tuple[float, list[str]]:
    doc: list[str] = []
    start = time.perf_counter()
    for pos, dl, ins in patches:
        doc[pos : pos + dl] = list(ins)
    return time.perf_counter() - start, doc


def memory(patches: list[Patch]) -> tuple[int, int]:
    """Peak bytes during a replay and bytes the final document holds (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    _, rga = replay_rga(patches)
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del rga
    return peak - base, current - base
