"""Shared pieces of the CRDT tests: a server that applies ops in order, op
generators per type, and the JSON/msgpack round trip."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import msgpack
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from pycrdt import Doc, Text

from syncd.crdt.base import Crdt, OpContext
from syncd.crdt.tree import ROOT, Tree
from syncd.errors import ApiError

EXAMPLES = int(os.environ.get("SYNCD_HYPOTHESIS_EXAMPLES", "60"))
"""Hypothesis examples per property; raise it for a longer run."""

PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

CLIENTS = st.integers(1, 4)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.sampled_from([0.5, -1.25, 1.0])
    | st.text("ab é", max_size=3)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text("xyz", max_size=2), inner, max_size=3)
    ),
    max_leaves=6,
)
json_objects = st.dictionaries(st.text("xyz", max_size=2), json_values, max_size=3)


def ctx(client_id: int = 1, now_ms: int = 1_000_000, seq: int = 1) -> OpContext:
    return OpContext(client_id=client_id, now_ms=now_ms, seq=seq)


def roundtrip_msgpack(state: Any) -> Any:
    return msgpack.unpackb(msgpack.packb(state), raw=False)


def roundtrip_json(state: Any) -> Any:
    return json.loads(json.dumps(state))


class Server:
    """Applies ops one at a time, like the engine, and keeps the deltas."""

    def __init__(self, cls: type[Crdt], now_ms: int = 1_000_000) -> None:
        self.crdt = cls.new()
        self.now_ms = now_ms
        self.seq = 0
        self.deltas: list[dict[str, Any]] = []
        self.refused = 0

    def apply(self, client_id: int, op: dict[str, Any]) -> dict[str, Any] | None:
        """Apply ``op``; a refusal must leave the state untouched."""
        before = self.crdt.state()
        try:
            delta = self.crdt.apply_op(op, OpContext(client_id, self.now_ms, self.seq + 1))
        except ApiError:
            assert self.crdt.state() == before, f"refused {op} changed the state"
            self.refused += 1
            return None
        self.seq += 1
        # Deltas travel as msgpack: replicas get a decoded copy, never the server's objects.
        copy: dict[str, Any] = roundtrip_msgpack(delta)
        self.deltas.append(copy)
        return copy


OpMaker = Callable[[st.DataObject, Server], dict[str, Any]]


def run_server(data: st.DataObject, cls: type[Crdt], make_op: OpMaker, max_ops: int = 25) -> Server:
    """Random ops from 2-4 clients applied in order at a server, with time moving on."""
    server = Server(cls)
    clients = data.draw(st.integers(2, 4), label="clients")
    for _ in range(data.draw(st.integers(1, max_ops), label="ops")):
        server.now_ms += data.draw(st.sampled_from([0, 0, 1, 7, 1500, 40_000, 200_000]))
        client = data.draw(st.integers(1, clients), label="client")
        server.apply(client, make_op(data, server))
    return server


def delivery(data: st.DataObject, n: int, label: str) -> list[int]:
    """Every index in ``range(n)`` in some order, some of them twice.

    Any order, not just causally valid ones: every type here converges under
    arbitrary reordering, which includes every causal order.
    """
    order = data.draw(st.permutations(list(range(n))), label=label)
    if n:
        dups = data.draw(st.lists(st.integers(0, n - 1), max_size=3), label=f"{label} dups")
        for i in dups:
            at = data.draw(st.integers(order.index(i), len(order)))
            order.insert(at, i)
    return order


def subset(data: st.DataObject, n: int, label: str) -> list[int]:
    return (
        sorted(data.draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=n), label=label))
        if n
        else []
    )


def check_tree_invariant(crdt: Crdt) -> None:
    """Every node's parent chain ends at the root: no cycle, nothing dangling;
    every node's kept height is its subtree's."""
    if not isinstance(crdt, Tree):
        return
    for node in crdt.node_ids():
        seen = set()
        while node != ROOT:
            assert node not in seen, "cycle"
            seen.add(node)
            parent = crdt.parent_of(node)
            assert parent is not None and parent in crdt, f"{node} dangles"
            node = parent
    # The heights a move's depth check reads are those of the tree as it is.
    height = dict.fromkeys(crdt.node_ids(), 0)
    for node in crdt.node_ids():
        below = 0
        while node != ROOT:
            node = crdt.parent_of(node)
            below += 1
            if height[node] < below:
                height[node] = below
    for node, levels in height.items():
        assert crdt._height(node) == levels, (node, crdt._height(node), levels)


def dependent_updates(client_id: int = 77) -> tuple[Doc[Any], bytes, bytes]:
    """A Yjs writer (a pycrdt ``Doc``), its first update ("hello" in the text
    root ``content``) and its second (" world"), which builds on the first: sent
    alone, the second waits for its dependency."""
    writer: Doc[Any] = Doc(client_id=client_id)
    text = writer.get("content", type=Text)
    text.insert(0, "hello")
    first = writer.get_update()
    state = writer.get_state()
    text.insert(5, " world")
    return writer, first, writer.get_update(state)
