"""Replay a sequential editing trace through the rga type and compare with list splicing.

Usage::

    .venv/bin/python -m perf.studies.rga_trace tests/data/traces/rustcode.json.gz [--repeat 5] [--copies 2]

Every patch ``[pos, del, ins]`` becomes real ops through ``Rga.apply_op`` (a
delete ``{"op": "delete", "index": pos, "count": del}``, then an insert
``{"op": "insert", "index": pos, "text": ins}``), each producing its delta; the
op maps are built inside the timed loop, as a client's would be. The same run
times plain Python list splicing (``doc[pos:pos + del] = list(ins)``) of the
same patches, and the ratio of the two. Times are the best of ``--repeat``
runs, the two kinds interleaved, because the machine is shared.

Memory is measured in a separate replay under tracemalloc (which slows
allocation down, so it is not timed): the peak during the replay and what the
final document holds. ``--copies K`` replays the trace K times, each copy
appended after the last, to reach larger documents (100k+ characters).

The replay itself is perf.lib.traces's, which perf.bench.rga_peers runs over
every trace in the suite.
"""

from __future__ import annotations

import argparse
import json
import resource
from pathlib import Path
from typing import Any

import msgpack

from perf.lib.traces import load_patches, memory, replay_list, replay_rga
from syncd.crdt.rga import Rga


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="a sequential trace (.json.gz)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each kind")
    parser.add_argument("--copies", type=int, default=1, help="replay the trace this many times")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    patches, expected = load_patches(args.trace, args.copies)
    rga_times: list[float] = []
    list_times: list[float] = []
    rga: Rga | None = None
    doc: list[str] = []
    for _ in range(args.repeat):
        took, rga = replay_rga(patches)
        rga_times.append(took)
        took, doc = replay_list(patches)
        list_times.append(took)
    assert rga is not None
    rga_best = min(rga_times)
    list_best = min(list_times)
    text: str = rga.view(0).get("text", "")
    state = rga.state()
    peak, final = memory(patches)
    result: dict[str, Any] = {
        "trace": Path(args.trace).name,
        "copies": args.copies,
        "patches": len(patches),
        "final_length": len(text),
        "rga_seconds": round(rga_best, 4),
        "patches_per_second": round(len(patches) / rga_best),
        "list_seconds": round(list_best, 4),
        "ratio": round(rga_best / list_best, 2),
        "text_ok": text == expected,
        "list_ok": "".join(doc) == expected,
        "peak_mb": round(peak / 1e6, 1),
        "final_state_mb": round(final / 1e6, 1),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "state_runs": len(state["runs"]),
        "state_msgpack_kb": round(len(msgpack.packb(state)) / 1024, 1),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['trace']}: {result['patches']} patches, final length {result['final_length']}"
            f" (copies {args.copies})\n"
            f"  rga   {rga_best:.3f} s  {result['patches_per_second']} patches/s"
            f"  (best of {args.repeat})\n"
            f"  list  {list_best:.3f} s  ratio rga/list {result['ratio']}\n"
            f"  final text equals endContent: {result['text_ok']}\n"
            f"  memory: peak {result['peak_mb']} MB during replay, final document"
            f" {result['final_state_mb']} MB, max RSS {result['max_rss_mb']} MB\n"
            f"  state: {result['state_runs']} runs, {result['state_msgpack_kb']} KiB as msgpack"
        )
    return 0 if result["text_ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
