"""Real editing histories through the rga type (traces: tests/data/traces, CC BY 4.0).

Sequential traces replay through index ops, as an editor would send them, and
must end at the trace's ``endContent``; a replica fed every delta in order must
end in the same state. The concurrent trace replays with one replica per agent:
each transaction's positions are relative to the document its agent saw after
the transaction's parents, so before it the agent's replica receives exactly
the deltas of the parents it has not seen yet.
"""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path
from typing import Any

import msgpack
import pytest

from syncd.crdt.base import OpContext
from syncd.crdt.rga import Rga

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
"""The trace files, in the repository (see the README there for their license)."""

SEQUENTIAL = ["sveltecomponent", "rustcode", "seph-blog1"]


@functools.cache
def load(name: str) -> dict[str, Any]:
    path = TRACES / f"{name}.json.gz"
    if not path.is_file():
        pytest.fail(f"trace {path} is missing from the repository")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        trace: dict[str, Any] = json.load(fh)
    return trace


def apply_patches(rga: Rga, patches: list[list[Any]], ctx: OpContext) -> list[dict[str, Any]]:
    deltas = []
    for pos, dl, ins in patches:
        if dl:
            deltas.append(rga.apply_op({"op": "delete", "index": pos, "count": dl}, ctx))
        if ins:
            deltas.append(rga.apply_op({"op": "insert", "index": pos, "text": ins}, ctx))
    return deltas


@pytest.mark.parametrize("name", SEQUENTIAL)
def test_sequential_trace_ends_at_its_end_content(name: str) -> None:
    trace = load(name)
    assert not trace.get("startContent")
    server = Rga.new()
    replica = Rga.new()
    ctx = OpContext(client_id=1, now_ms=0, seq=0)
    for txn in trace["txns"]:
        # Deltas go to the replica at once: keeping 100k+ of them alive would
        # make the garbage collector, not the type, the cost of this test.
        for delta in apply_patches(server, txn["patches"], ctx):
            replica.apply_delta(delta)
    assert server.view(0)["text"] == trace["endContent"]
    assert server.length == len(trace["endContent"])
    state = server.state()
    assert replica.state() == state

    restored = Rga.from_state(msgpack.unpackb(msgpack.packb(state), raw=False))
    assert restored.view(0)["text"] == trace["endContent"]
    assert restored.state() == state


def test_concurrent_trace_converges_to_its_end_content() -> None:
    trace = load("friendsforever.concurrent")
    txns = trace["txns"]
    agents = trace["numAgents"]
    replicas = [Rga.new() for _ in range(agents)]
    seen: list[set[int]] = [set() for _ in range(agents)]
    contexts = [OpContext(client_id=agent + 1, now_ms=0, seq=0) for agent in range(agents)]
    deltas: list[list[dict[str, Any]]] = []
    for i, txn in enumerate(txns):
        agent = txn["agent"]
        replica, have = replicas[agent], seen[agent]
        # What this agent has not seen of the transaction's history; what it
        # has seen is closed under parents, so the walk stops there.
        missing: list[int] = []
        stack = list(txn["parents"])
        while stack:
            parent = stack.pop()
            if parent in have:
                continue
            have.add(parent)
            missing.append(parent)
            stack.extend(txns[parent]["parents"])
        for parent in sorted(missing):  # parents come before children in the file
            for delta in deltas[parent]:
                replica.apply_delta(delta)
        deltas.append(apply_patches(replica, txn["patches"], contexts[agent]))
        have.add(i)

    for agent, replica in enumerate(replicas):
        for i in range(len(txns)):
            if i not in seen[agent]:
                for delta in deltas[i]:
                    replica.apply_delta(delta)
    first = replicas[0].state()
    for replica in replicas:
        assert replica.view(0)["text"] == trace["endContent"]
        assert replica.state() == first
    merged = replicas[0].clone()
    merged.merge(replicas[1])
    assert merged.state() == first
