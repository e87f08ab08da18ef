"""What a select-all delete of an rga document costs, deleted range by range
and in one pass over the blocks (:meth:`RunSeq.delete_ranges`, ``bulk``).

Usage::

    .venv/bin/python -m perf.studies.rga_delete [--runs 96000] [--repeat 5] [--json]

Documents (each built once, then copied for every timed delete):

- ``interleaved``: ``--runs`` elements typed at the end by two writers in
  turn, one element each, so that no two join: a run per element, each id
  range one run (what a select-all of a document many people typed sends);
- ``backwards``: ``--runs`` elements typed by one writer at the start, one at
  a time: a run per element again, but the ids one range of consecutive
  counters that covers every run;
- ``every-other``: one insert of ``2 * --runs`` elements, every other one
  deleted by ids: a range per element left, each deleted run joining the
  deleted runs around it;
- ``seph-blog1 x2``: the trace of tests/data/traces replayed twice
  (perf.lib.traces): one writer's real editing, its runs cut by the edits.

For each, the ranges are those a delete op of every visible id gets
(:func:`syncd.crdt.rga.ids.id_ranges`), and the figures are CPU seconds
(the machine is shared), the least of ``--repeat`` runs, the two ways taking
turns so that a burst of load falls on both: ``one_by_one_s`` (the way every
delete went before the bulk pass: :meth:`RunSeq._delete_range` per range, the
code unchanged), ``bulk_s``, and the whole op ``op_s`` as a client's
``{"op": "delete", "ids": [...]}`` costs it now (reading the ids, checking
they exist, deleting: whichever way ``delete_ranges`` picks), with
``read_s`` (``id_ranges``) and ``check_s`` (that they exist:
:meth:`RunSeq.contains_ranges`) apart, and
which way the op takes (:meth:`RunSeq.bulk_pays`).
Every bulk delete's result is checked against the range-by-range one's.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from perf.lib.traces import default_traces, load_patches, replay_rga
from syncd.crdt.base import OpContext
from syncd.crdt.rga import Rga
from syncd.crdt.rga.ids import id_ranges


def _ctx(client: int) -> OpContext:
    return OpContext(client_id=client, now_ms=0, seq=0)


def interleaved(runs: int) -> Rga:
    rga = Rga.new()
    for i in range(runs):
        rga.apply_op({"op": "insert", "index": rga.length, "text": "x"}, _ctx(1 + i % 2))
    return rga


def backwards(runs: int) -> Rga:
    rga = Rga.new()
    for _ in range(runs):
        rga.apply_op({"op": "insert", "index": 0, "text": "x"}, _ctx(1))
    return rga


def every_other(runs: int) -> Rga:
    rga = Rga.new()
    rga.apply_op({"op": "insert", "index": 0, "text": "x" * (2 * runs)}, _ctx(1))
    ids = rga.ids()
    rga.apply_op({"op": "delete", "ids": ids[::2]}, _ctx(1))
    return rga


def trace(name: str, copies: int) -> Rga:
    patches, _ = load_patches(str(default_traces() / f"{name}.json.gz"), copies)
    return replay_rga(patches)[1]


def _delete_time(rga: Rga, ranges: list[list[int]], bulk: bool) -> float:
    """CPU seconds of deleting ``ranges`` from ``rga`` one way or the other,
    its id index built first (as the op's check of the ids builds it)."""
    seq = rga._seq
    seq.has(1, 1)
    copy = [list(r) for r in ranges]
    return _cpu(partial(seq.delete_ranges, copy, bulk=bulk))


def _cpu(call: Callable[[], Any]) -> float:
    start = time.process_time()
    call()
    return time.process_time() - start


def measure(name: str, base: Rga, repeat: int) -> dict[str, Any]:
    ids = base.ids()
    ranges = id_ranges(ids, "ids")
    best = {"one_by_one_s": float("inf"), "bulk_s": float("inf"), "op_s": float("inf")}
    best |= {"read_s": float("inf"), "check_s": float("inf")}
    for _ in range(repeat):
        done: list[Rga] = []
        for way, bulk in (("one_by_one_s", False), ("bulk_s", True)):
            rga = base.clone()
            best[way] = min(best[way], _delete_time(rga, ranges, bulk))
            done.append(rga)
        assert done[0].state() == done[1].state() and done[1].length == 0
        rga = base.clone()
        op = {"op": "delete", "ids": ids}
        best["op_s"] = min(best["op_s"], _cpu(partial(rga.apply_op, op, _ctx(1))))
        best["read_s"] = min(best["read_s"], _cpu(partial(id_ranges, ids, "ids")))
        seq = base.clone()._seq
        best["check_s"] = min(best["check_s"], _cpu(partial(seq.contains_ranges, ranges)))
    return {
        "document": name,
        "ids": len(ids),
        "runs": base.run_count(),
        "ranges": len(ranges),
        "blocks": len(base._seq.runs_per_block()),
        "op_takes": "bulk" if base.clone()._seq.bulk_pays(ranges) else "one by one",
        **{key: round(value, 4) for key, value in best.items()},
        "speedup": round(best["one_by_one_s"] / best["bulk_s"], 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=96_000, help="runs per built document")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each way")
    parser.add_argument("--json", action="store_true", help="print one JSON object per line")
    args = parser.parse_args(argv)
    documents: list[tuple[str, Callable[[], Rga]]] = [
        ("interleaved", lambda: interleaved(args.runs)),
        ("backwards", lambda: backwards(args.runs)),
        ("every-other", lambda: every_other(args.runs)),
        ("seph-blog1 x2", lambda: trace("seph-blog1", 2)),
    ]
    for name, build in documents:
        result = measure(name, build(), args.repeat)
        if args.json:
            print(json.dumps(result))
        else:
            print(
                f"{name}: {result['ids']} ids in {result['runs']} runs, {result['ranges']} ranges,"
                f" {result['blocks']} blocks (the op takes {result['op_takes']})\n"
                f"  delete_ranges one by one {result['one_by_one_s']:.4f} s,"
                f" bulk {result['bulk_s']:.4f} s ({result['speedup']}x)\n"
                f"  whole op {result['op_s']:.4f} s: reading the ids {result['read_s']:.4f} s,"
                f" checking them {result['check_s']:.4f} s  (CPU, best of {args.repeat})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
