"""The state a replica loads (YDoc.replica_state: a subscription's snapshot,
a ``?format=crdt`` read) carries the updates that wait for their
dependencies, merged into its update and listed as they came; a replica
that then applies the op deltas after it has the whole document.

The integrated document alone (``state()``) left them out: the op delta
that lets one in carries only its dependency, so the replica never had it.
"""

from __future__ import annotations

import base64
import random
from dataclasses import dataclass
from typing import Any, Final

from pycrdt import Doc, Text

from syncd.crdt.ydoc import YDoc
from tests.crdt.crdt_testlib import dependent_updates
from tests.crdt.test_ydoc import _meaning, two_writers

DELIVERIES: Final = 120
"""Random out-of-order deliveries of two writers' updates, each cut at every
point where some wait."""
UPDATES: Final = 8


def _op(update: bytes) -> dict[str, Any]:
    return {"op": "update", "update": base64.b64encode(update).decode()}


def _text(doc: Doc[Any]) -> str:
    return str(doc.get("content", type=Text))


def _loaded(state: dict[str, Any]) -> Doc[Any]:
    """A Yjs client's copy: the state's update applied, the rest left."""
    doc: Doc[Any] = Doc()
    doc.apply_update(base64.b64decode(state["update"]))
    return doc


def test_with_nothing_waiting_it_is_the_state() -> None:
    ydoc = YDoc.new()
    _, first, second = dependent_updates()
    ydoc.apply_delta(_op(first))
    ydoc.apply_delta(_op(second))
    assert ydoc.replica_state() == ydoc.state() == {"update": ydoc.state()["update"]}


def test_an_update_that_waits_reaches_the_replica_and_integrates_with_its_dependency() -> None:
    _, first, second = dependent_updates()
    server = YDoc.new()
    server.apply_delta(_op(second))
    state = server.replica_state()
    assert state["pending"] == [_op(second)["update"]]
    assert YDoc.from_state(server.state()).pending_bytes() == 0  # the state leaves it out
    replica = YDoc.from_state(state)
    assert replica.pending_bytes() == server.pending_bytes() > 0  # tracked, as on the server
    client = _loaded(state)
    replica.apply_delta(_op(first))
    client.apply_update(first)
    assert _text(replica.doc) == _text(client) == "hello world"
    assert replica.pending_bytes() == 0


def test_a_deletion_that_waits_for_its_items_reaches_the_replica() -> None:
    writer, first, _ = dependent_updates()
    text = writer.get("content", type=Text)
    state_vector = writer.get_state()
    del text[0:6]  # "hello " of "hello world"
    deletion = writer.get_update(state_vector)
    server = YDoc.new()
    server.apply_delta(_op(deletion))  # before what it deletes
    state = server.replica_state()
    assert "pending" in state
    replica, client = YDoc.from_state(state), _loaded(state)
    replica.apply_delta(_op(first))  # "hello": its first five characters deleted
    client.apply_update(first)
    assert _text(replica.doc) == _text(client) == ""


@dataclass(frozen=True, slots=True)
class _Cut:
    """A point of an out-of-order delivery where some updates wait."""

    updates: list[bytes]
    order: list[int]
    """The delivery order (indices of ``updates``)."""
    at: int
    """How many were delivered."""
    server: YDoc
    """The document then."""
    want: YDoc
    """The document that got them all, in order."""


def _cuts() -> list[_Cut]:
    cuts = []
    for seed in range(DELIVERIES):
        updates = two_writers(UPDATES, seed)
        in_order = YDoc.new()
        for update in updates:
            in_order.apply_delta(_op(update))
        order = list(range(UPDATES))
        random.Random(seed).shuffle(order)
        server = YDoc.new()
        for at, i in enumerate(order[:-1], 1):
            server.apply_delta(_op(updates[i]))
            if server.pending_bytes():
                cuts.append(_Cut(updates, order, at, server.clone(), in_order))
    return cuts


def test_a_replica_loaded_while_updates_wait_ends_as_the_document() -> None:
    """Out-of-order deliveries cut anywhere some wait: a replica of the type
    loaded from the state then given the rest, in the same order, is the
    document that got them all in order; one that loaded the integrated
    document alone (``state()``) is not, nearly always. A Yjs client that
    applies only the merged update is left to Yrs, which keeps some waiting
    for good (the reason for ``pending``: YDoc.replica_state)."""
    cuts = _cuts()
    assert len(cuts) > DELIVERIES  # several cuts a delivery
    lost = stuck = 0
    for cut in cuts:
        want = _meaning(cut.want)
        replica = YDoc.from_state(cut.server.replica_state())
        without = YDoc.from_state(cut.server.state())
        client = _loaded(cut.server.replica_state())
        for i in cut.order[cut.at :]:
            replica.apply_delta(_op(cut.updates[i]))
            without.apply_delta(_op(cut.updates[i]))
            client.apply_update(cut.updates[i])
        assert _meaning(replica) == want, (cut.order, cut.at)
        lost += _meaning(without) != want
        stuck += _text(client) != want[0]
    assert lost > len(cuts) // 2
    assert 0 < stuck < len(cuts) // 4
