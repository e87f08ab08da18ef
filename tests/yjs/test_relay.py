"""The Yjs rooms' awareness relay through the replicator, in process on the suite's
PostgreSQL: its outbox limit, the size limit of one notice, and two nodes'
rooms joined through the real NOTIFY channel."""

from __future__ import annotations

from pycrdt import Awareness, Doc

from syncd.yjs.relay import AWARENESS_OUTBOX_MAX
from tests.store.pgnodes import StartNode, eventually, settled

DOC = "yd:cursors"


def awareness_update(state: object) -> bytes:
    awareness = Awareness(Doc())
    awareness.set_local_state(state)
    return awareness.encode_awareness_update([awareness.client_id])


class Peer:
    def __init__(self) -> None:
        self.received: list[bytes] = []

    def send_awareness(self, update: bytes, clients: object = ()) -> None:
        self.received.append(update)


async def test_a_full_outbox_drops_and_counts(start_node: StartNode) -> None:
    app = await start_node("a")
    cluster, relay = app.cluster, app.awareness_relay
    assert cluster is not None and relay is not None
    update = awareness_update({"user": "ada"})
    extra = 10
    for _ in range(AWARENESS_OUTBOX_MAX + extra):  # no await: the speaker cannot run meanwhile
        relay.publish("n", DOC, update)
    assert cluster.stats.awareness_dropped == extra
    await eventually(lambda: cluster.stats.awareness_sent == AWARENESS_OUTBOX_MAX)


async def test_an_update_too_large_to_notify_stays_on_its_node(start_node: StartNode) -> None:
    app = await start_node("a")
    cluster, relay = app.cluster, app.awareness_relay
    assert cluster is not None and relay is not None
    relay.publish("n", DOC, awareness_update({"user": "x" * 8000}))
    assert cluster.stats.awareness_dropped == 1
    assert cluster.stats.awareness_sent == 0


async def test_rooms_on_two_nodes_act_as_one(start_node: StartNode) -> None:
    a, b = await start_node("a"), await start_node("b")
    await settled(a)
    await settled(b)
    on_a, on_b = Peer(), Peer()
    room_a = a.rooms.join("n", DOC, on_a)
    b.rooms.join("n", DOC, on_b)
    update = awareness_update({"user": "ada"})
    room_a.apply(on_a, update)
    await eventually(lambda: update in on_b.received)
    # Its sender has it once, from its own room (its sign of life), never
    # again from the other node.
    assert on_a.received == [update]
