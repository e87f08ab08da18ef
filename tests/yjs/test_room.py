"""Rooms without sockets: awareness within one node, and between the rooms of
two nodes joined by a relay that hands each notice straight to the other
node (what the replicator's NOTIFY channel does, minus PostgreSQL)."""

from __future__ import annotations

from typing import Any

import pytest
from pycrdt import Awareness, Doc

from syncd.yjs.room import REMOTE_TIMEOUT_S, AwarenessRefused, Rooms

NS, DOC = "ns", "yd:doc"


class Peer:
    """A connection: keeps what the room sends it, decoded by a real Awareness."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.view = Awareness(Doc())

    def send_awareness(self, update: bytes, clients: object = ()) -> None:
        self.sent.append(update)
        self.view.apply_awareness_update(update, "room")

    def states(self) -> dict[int, Any]:
        return {k: v for k, v in self.view.states.items() if k != self.view.client_id}


class Client:
    """A provider's own awareness (y-protocols, via pycrdt)."""

    def __init__(self, name: str) -> None:
        self.awareness = Awareness(Doc())
        self.awareness.set_local_state({"user": name})

    @property
    def id(self) -> int:
        return self.awareness.client_id

    def update(self) -> bytes:
        return self.awareness.encode_awareness_update([self.id])


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Link:
    """The relay of one node: what it publishes reaches the other node's rooms."""

    def __init__(self) -> None:
        self.other: Rooms | None = None
        self.published: list[bytes] = []
        self.asked = 0

    def publish(self, ns: str, crdt_id: str, update: bytes) -> None:
        self.published.append(update)
        assert self.other is not None
        self.other.remote_update(ns, crdt_id, update)

    def ask(self, ns: str, crdt_id: str) -> None:
        self.asked += 1
        assert self.other is not None
        self.other.remote_query(ns, crdt_id)


def two_nodes(clock: Clock) -> tuple[Rooms, Rooms, Link, Link]:
    a, b = Rooms(clock), Rooms(clock)
    link_a, link_b = Link(), Link()
    link_a.other, link_b.other = b, a
    a.relay, b.relay = link_a, link_b
    return a, b, link_a, link_b


def test_one_node_relays_to_the_others_and_removes_on_leave() -> None:
    rooms = Rooms()
    p1, p2 = Peer(), Peer()
    room = rooms.join(NS, DOC, p1)
    rooms.join(NS, DOC, p2)
    alice = Client("alice")
    room.apply(p1, alice.update())
    # Relayed to the room, its sender too (its sign of life).
    assert p1.states() == p2.states() == {alice.id: {"user": "alice"}}
    rooms.leave(NS, DOC, p1)
    assert p2.states() == {}
    rooms.leave(NS, DOC, p2)
    assert len(rooms) == 0


def test_a_connection_announcing_too_many_clients_is_refused() -> None:
    rooms = Rooms()
    peer = Peer()
    room = rooms.join(NS, DOC, peer)
    many = [Client(str(i)) for i in range(65)]
    with pytest.raises(AwarenessRefused):
        for client in many:
            room.apply(peer, client.update())


def test_awareness_crosses_nodes_and_leaves_with_the_connection() -> None:
    clock = Clock()
    a, b, link_a, link_b = two_nodes(clock)
    on_a, on_b = Peer(), Peer()
    room_a = a.join(NS, DOC, on_a)
    b.join(NS, DOC, on_b)
    alice = Client("alice")
    room_a.apply(on_a, alice.update())
    assert on_b.states() == {alice.id: {"user": "alice"}}
    # Remote updates go to this node's connections, never back out.
    assert link_b.published == []
    a.leave(NS, DOC, on_a)
    assert on_b.states() == {}
    assert len(link_a.published) == 2


def test_a_new_room_asks_and_gets_the_states_already_there() -> None:
    clock = Clock()
    a, b, _link_a, link_b = two_nodes(clock)
    on_a = Peer()
    room_a = a.join(NS, DOC, on_a)
    alice = Client("alice")
    room_a.apply(on_a, alice.update())  # b has no room: the update is not kept there
    late = Peer()
    room_b = b.join(NS, DOC, late)
    assert link_b.asked == 1
    # What a newcomer is sent on b (SendAwareness) now holds alice.
    states = room_b.states()
    assert states is not None
    late.send_awareness(states)
    assert late.states() == {alice.id: {"user": "alice"}}


def test_a_query_answers_only_local_states() -> None:
    clock = Clock()
    a, b, link_a, link_b = two_nodes(clock)
    on_a, on_b = Peer(), Peer()
    room_a = a.join(NS, DOC, on_a)
    room_b = b.join(NS, DOC, on_b)
    room_a.apply(on_a, Client("alice").update())
    room_b.apply(on_b, Client("bob").update())
    before = len(link_a.published)
    a.remote_query(NS, DOC)
    assert len(link_a.published) == before + 1
    answer = Awareness(Doc())
    answer.apply_awareness_update(link_a.published[-1], None)
    assert [s for k, s in answer.states.items() if k != answer.client_id] == [{"user": "alice"}]


def test_remote_clients_that_stop_renewing_expire() -> None:
    clock = Clock()
    a, b, _, _ = two_nodes(clock)
    on_a, on_b = Peer(), Peer()
    room_a = a.join(NS, DOC, on_a)
    b.join(NS, DOC, on_b)
    alice, carol = Client("alice"), Client("carol")
    room_a.apply(on_a, alice.update())
    room_a.apply(on_a, carol.update())
    clock.now += REMOTE_TIMEOUT_S - 1
    carol.awareness.set_local_state({"user": "carol"})  # a renewal, as providers send
    room_a.apply(on_a, carol.update())
    b.expire()
    assert set(on_b.states()) == {alice.id, carol.id}
    clock.now += 2  # alice's node went quiet past the timeout; carol renewed 2 s ago
    b.expire()
    assert set(on_b.states()) == {carol.id}
    # The node that owns alice's connection keeps her: only remote states expire.
    a.expire()
    assert alice.id in room_a.awareness.states


def test_a_malformed_remote_update_is_ignored() -> None:
    rooms = Rooms()
    peer = Peer()
    rooms.join(NS, DOC, peer)
    rooms.remote_update(NS, DOC, b"\xff\xff\xff")
    rooms.remote_update(NS, "yd:no-room-here", Client("x").update())
    assert peer.sent == []
