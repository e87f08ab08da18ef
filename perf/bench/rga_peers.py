"""Editing traces through syncd's rga type, plain list splicing and pycrdt, in one run.

For every trace in ``--traces`` (default: ``$SYNCD_TRACES``, else
``tests/data/traces`` in the repository):

* a sequential trace is replayed three ways: through ``Rga.apply_op`` (one op
  per delete and per insert, as :mod:`perf.studies.rga_trace` does), through Python
  list splicing, and through pycrdt (the Python binding of Yrs; one
  transaction per patch). Each result is checked against the trace's
  ``endContent``. Times are the best of ``--repeat`` runs (pycrdt, much
  slower, of ``--pycrdt-repeat``), the kinds interleaved, since the machine is
  shared. Then the memory held by the final document, replaying the trace as
  many times as it takes (each copy appended after the last) to reach
  ``--min-chars`` characters, measured by tracemalloc in an untimed replay;
* a concurrent trace (``"kind": "concurrent"``) is replayed with one replica
  per agent: before each transaction its agent's replica receives the deltas
  of every transaction in the transaction's causal history that it has not
  seen (in trace order, which is topological), then makes the
  transaction's patches as local ops, whose deltas the other replicas take
  later. At the end every replica takes what it lacks and must equal
  ``endContent``. pycrdt does the same with one Doc per agent, exchanging
  each transaction's update (the diff from the state vector before it).

``--max-patches N`` keeps the first N patches (or transactions) of each
trace, for a quick run; the results are then compared with each other
instead of with ``endContent``.

Usage: python -m perf.bench.rga_peers [--repeat 3] [--max-patches N] [--json OUT]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import time
from pathlib import Path
from typing import Any

from perf.lib.traces import Patch, default_traces, memory, replay_list, replay_rga
from perf.suite.registry import RGA_DOCUMENT_CHARS
from syncd.crdt.base import OpContext
from syncd.crdt.rga import Rga

MIN_CHARS = RGA_DOCUMENT_CHARS
"""The document size the memory target is set for (perf.suite.registry)."""


def load(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        trace: dict[str, Any] = json.load(fh)
    return trace


def sequential_patches(trace: dict[str, Any], limit: int | None) -> list[Patch]:
    patches = [(p[0], p[1], p[2]) for txn in trace["txns"] for p in txn["patches"]]
    return patches[:limit] if limit else patches


def copied(patches: list[Patch], length: int, copies: int) -> list[Patch]:
    """The trace ``copies`` times over, each copy typed after the text of the last."""
    out: list[Patch] = []
    for copy in range(copies):
        shift = copy * length
        out.extend((pos + shift, dl, ins) for pos, dl, ins in patches)
    return out


def replay_pycrdt(patches: list[Patch]) -> tuple[float, str]:
    from pycrdt import Doc, Text

    doc: Doc[Any] = Doc()
    text = doc.get("t", type=Text)
    transaction = doc.transaction
    start = time.perf_counter()
    for pos, dl, ins in patches:
        with transaction():
            if dl:
                del text[pos : pos + dl]
            if ins:
                text.insert(pos, ins)
    return time.perf_counter() - start, str(text)


def sequential(
    path: Path, trace: dict[str, Any], args: argparse.Namespace
) -> tuple[dict[str, Any], dict[str, Any]]:
    patches = sequential_patches(trace, args.max_patches)
    end = None if args.max_patches else trace["endContent"]
    rga_times: list[float] = []
    list_times: list[float] = []
    pycrdt_times: list[float] = []
    rga_text = list_text = pycrdt_text = ""
    for i in range(max(args.repeat, args.pycrdt_repeat)):
        if i < args.repeat:
            took, rga = replay_rga(patches)
            rga_times.append(took)
            rga_text = rga.view(0).get("text", "")
            del rga
            took, doc = replay_list(patches)
            list_times.append(took)
            list_text = "".join(doc)
        if i < args.pycrdt_repeat:
            took, pycrdt_text = replay_pycrdt(patches)
            pycrdt_times.append(took)
    expected = end if end is not None else list_text
    speed: dict[str, Any] = {
        "trace": path.name,
        "patches": len(patches),
        "final_length": len(expected),
        "rga_s": min(rga_times),
        "list_s": min(list_times),
        "pycrdt_s": min(pycrdt_times) if pycrdt_times else None,
        "rga_ok": rga_text == expected,
        "list_ok": list_text == expected,
        "pycrdt_ok": pycrdt_text == expected if pycrdt_times else None,
        "checked_against": "endContent" if end is not None else "list splicing",
    }
    copies = max(1, math.ceil(args.min_chars / max(len(expected), 1)))
    peak, final = memory(copied(patches, len(expected), copies))
    mem = {
        "trace": path.name,
        "copies": copies,
        "final_length": len(expected) * copies,
        "peak_mb": peak / 1e6,
        "final_mb": final / 1e6,
    }
    return speed, mem


# -- concurrent traces -----------------------------------------------------------


def history(txns: list[dict[str, Any]], parents: list[int], seen: set[int]) -> list[int]:
    """Transactions in the causal history of ``parents`` not in ``seen`` (added to it)."""
    need: list[int] = []
    stack = [p for p in parents if p not in seen]
    while stack:
        j = stack.pop()
        if j in seen:
            continue
        seen.add(j)
        need.append(j)
        stack.extend(p for p in txns[j]["parents"] if p not in seen)
    need.sort()
    return need


def concurrent_rga(trace: dict[str, Any], txns: list[dict[str, Any]]) -> tuple[float, list[str]]:
    agents = trace["numAgents"]
    replicas = [Rga.new() for _ in range(agents)]
    seen: list[set[int]] = [set() for _ in range(agents)]
    contexts = [OpContext(client_id=a + 1, now_ms=0, seq=0) for a in range(agents)]
    deltas: list[list[dict[str, Any]]] = []
    start = time.perf_counter()
    for i, txn in enumerate(txns):
        agent = txn["agent"]
        replica = replicas[agent]
        for j in history(txns, txn["parents"], seen[agent]):
            for delta in deltas[j]:
                replica.apply_delta(delta)
        out: list[dict[str, Any]] = []
        ctx = contexts[agent]
        for pos, dl, ins in txn["patches"]:
            if dl:
                out.append(replica.apply_op({"op": "delete", "index": pos, "count": dl}, ctx))
            if ins:
                out.append(replica.apply_op({"op": "insert", "index": pos, "text": ins}, ctx))
        deltas.append(out)
        seen[agent].add(i)
    for agent, replica in enumerate(replicas):
        for j in range(len(txns)):
            if j not in seen[agent]:
                for delta in deltas[j]:
                    replica.apply_delta(delta)
    took = time.perf_counter() - start
    return took, [r.view(0).get("text", "") for r in replicas]


def concurrent_pycrdt(trace: dict[str, Any], txns: list[dict[str, Any]]) -> tuple[float, list[str]]:
    from pycrdt import Doc, Text

    agents = trace["numAgents"]
    docs: list[Doc[Any]] = [Doc(client_id=a + 1) for a in range(agents)]
    texts = [d.get("t", type=Text) for d in docs]
    seen: list[set[int]] = [set() for _ in range(agents)]
    updates: list[bytes] = []
    start = time.perf_counter()
    for i, txn in enumerate(txns):
        agent = txn["agent"]
        doc, text = docs[agent], texts[agent]
        for j in history(txns, txn["parents"], seen[agent]):
            doc.apply_update(updates[j])
        before = doc.get_state()
        with doc.transaction():
            for pos, dl, ins in txn["patches"]:
                if dl:
                    del text[pos : pos + dl]
                if ins:
                    text.insert(pos, ins)
        updates.append(doc.get_update(before))
        seen[agent].add(i)
    for agent, doc in enumerate(docs):
        for j in range(len(txns)):
            if j not in seen[agent]:
                doc.apply_update(updates[j])
    took = time.perf_counter() - start
    return took, [str(t) for t in texts]


def concurrent(path: Path, trace: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    txns = trace["txns"][: args.max_patches] if args.max_patches else trace["txns"]
    rga_times: list[float] = []
    pycrdt_times: list[float] = []
    rga_texts: list[str] = []
    pycrdt_texts: list[str] = []
    for i in range(max(args.repeat, args.pycrdt_repeat)):
        if i < args.repeat:
            took, rga_texts = concurrent_rga(trace, txns)
            rga_times.append(took)
        if i < args.pycrdt_repeat:
            took, pycrdt_texts = concurrent_pycrdt(trace, txns)
            pycrdt_times.append(took)
    # A cut trace has no known end: the replicas must at least agree.
    expected = trace["endContent"] if not args.max_patches else rga_texts[0]
    return {
        "trace": path.name,
        "agents": trace["numAgents"],
        "txns": len(txns),
        "patches": sum(len(t["patches"]) for t in txns),
        "final_length": len(expected),
        "rga_s": min(rga_times),
        "pycrdt_s": min(pycrdt_times) if pycrdt_times else None,
        "rga_ok": all(t == expected for t in rga_texts),
        "pycrdt_ok": all(t == expected for t in pycrdt_texts) if pycrdt_times else None,
        "checked_against": "endContent" if not args.max_patches else "each other",
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"sequential": [], "memory": [], "concurrent": [], "skipped": []}
    paths = sorted(Path(args.traces).glob("*.json.gz"))
    if not paths:
        raise SystemExit(f"no traces (*.json.gz) in {args.traces}; set SYNCD_TRACES")
    for path in paths:
        trace = load(path)
        if trace.get("kind") == "concurrent":
            if trace.get("startContent"):
                result["skipped"].append(f"{path.name}: has a startContent")
                continue
            r = concurrent(path, trace, args)
            result["concurrent"].append(r)
            print(
                f"  {path.name}: {r['txns']} txns ({r['agents']} agents), rga {r['rga_s']:.3f} s"
                f" ok={r['rga_ok']}, pycrdt {r['pycrdt_s'] or float('nan'):.3f} s"
                f" ok={r['pycrdt_ok']}",
                flush=True,
            )
        elif trace.get("startContent"):
            result["skipped"].append(f"{path.name}: has a startContent")
        else:
            speed, mem = sequential(path, trace, args)
            result["sequential"].append(speed)
            result["memory"].append(mem)
            print(
                f"  {path.name}: {speed['patches']} patches, rga {speed['rga_s']:.3f} s,"
                f" list {speed['list_s']:.3f} s, pycrdt {speed['pycrdt_s'] or float('nan'):.3f} s"
                f" (ok: {speed['rga_ok']}/{speed['list_ok']}/{speed['pycrdt_ok']});"
                f" {mem['final_length']} chars hold {mem['final_mb']:.1f} MB",
                flush=True,
            )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--traces", default=str(default_traces()))
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of rga and list")
    parser.add_argument("--pycrdt-repeat", type=int, default=1, help="timed runs of pycrdt")
    parser.add_argument("--max-patches", type=int, default=0, help="cut each trace (0: whole)")
    parser.add_argument("--min-chars", type=int, default=MIN_CHARS, help="document for memory")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.pycrdt_repeat < 0:
        parser.error("--repeat must be >= 1 and --pycrdt-repeat >= 0")
    result = run(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    ok = all(r["rga_ok"] for r in result["sequential"] + result["concurrent"])
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
