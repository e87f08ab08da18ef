"""The hub's fan-out: publish_many gives every subscriber exactly what
publishing the deltas one by one would, in fewer calls when it can."""

from __future__ import annotations

import json
from typing import Any

import msgpack

from syncd.hub import DeliverEach, EncodedDelta, Hub
from syncd.ws.subscription import WsSubscription

NS = "n"


def op(crdt_id: str, seq: int, epoch: str = "e1") -> dict[str, Any]:
    return {"kind": "op", "ns": NS, "id": crdt_id, "seq": seq, "epoch": epoch, "op": {"v": seq}}


def deleted(crdt_id: str) -> dict[str, Any]:
    return {"kind": "deleted", "ns": NS, "id": crdt_id, "seq": 0}


class Connection:
    """What a subscription writes to, bytes in order. Like a session, it refuses
    a push once it holds ``room`` bytes or more (its transport has paused),
    whatever the size of the push."""

    def __init__(self, room: int = 1 << 30) -> None:
        self.data = b""
        self.pushes = 0
        self.room = room

    def push(self, data: bytes, subscription: WsSubscription) -> bool:
        if len(self.data) >= self.room:
            subscription.lag = True
            return False
        self.pushes += 1
        self.data += data
        return True

    def send(self, data: bytes) -> None:
        self.data += data

    def feed(self, head: bytes, state: bytes | bytearray) -> None:
        self.data += head + state


class Recorder(DeliverEach):
    """A subscriber with deliver() only (as SSE streams are)."""

    def __init__(self) -> None:
        self.seqs: list[int] = []

    def deliver(self, delta: EncodedDelta) -> None:
        self.seqs.append(delta.seq)


def synced_frame(crdt_id: str, seq: int, epoch: str | None) -> bytes:
    """The binary frame of the ``synced`` message that ends a start (docs/protocol.md)."""
    payload = msgpack.packb({"kind": "synced", "ns": NS, "id": crdt_id, "seq": seq, "epoch": epoch})
    assert len(payload) < 126  # a one-byte length
    return bytes([0x82, len(payload)]) + payload


def subscribed(
    hub: Hub, crdt_id: str, last_seq: int, room: int = 1 << 30, binary: bool = True
) -> tuple[WsSubscription, Connection]:
    """A subscription resumed up to date at ``last_seq`` of life e1 (or a
    fresh one at 0): its start is the ``synced`` message alone, which is
    checked here and then cleared, so the connection holds only what the
    hub pushes afterwards."""
    connection = Connection(room)
    epoch = "e1" if last_seq else None
    subscription = WsSubscription(connection, NS, crdt_id, binary, since=last_seq, epoch=epoch)
    hub.subscribe(NS, crdt_id, subscription)
    subscription.start([])
    assert (subscription.last_seq, subscription.epoch) == (last_seq, epoch)
    head, length, payload = connection.data[0], connection.data[1], connection.data[2:]
    assert (head, length) == (0x82 if binary else 0x81, len(payload))  # one whole frame
    message = msgpack.unpackb(payload) if binary else json.loads(payload)
    assert message == {"kind": "synced", "ns": NS, "id": crdt_id, "seq": last_seq, "epoch": epoch}
    assert connection.pushes == 0
    connection.data = b""
    return subscription, connection


STREAMS: list[list[dict[str, Any]]] = [
    [op("a", 1), op("a", 2), op("a", 3)],  # plain
    [op("a", 1), op("b", 1), op("a", 2), op("a", 3), op("b", 2)],  # interleaved
    [op("a", 3), op("a", 4), deleted("a"), op("a", 1, "e2"), op("a", 2, "e2")],  # new life
    [op("a", 2), op("a", 4)],  # a gap: not plain
]


def outcome(
    deltas: list[dict[str, Any]], many: bool, last_seq: int, room: int, binary: bool
) -> Any:
    hub = Hub()
    subs = [subscribed(hub, crdt_id, last_seq, room, binary) for crdt_id in ("a", "b")]
    recorder = Recorder()
    hub.subscribe(NS, "a", recorder)
    if many:
        hub.publish_many(deltas)
    else:
        for delta in deltas:
            hub.publish(delta)
    return [(c.data, s.last_seq, s.epoch, s.lag) for s, c in subs], recorder.seqs


def test_publish_many_is_publishing_one_by_one() -> None:
    for deltas in STREAMS:
        for last_seq in (0, 1, 2, 5):
            for room in (1 << 30, 0):  # open, or paused from the start
                for binary in (True, False):
                    one_by_one = outcome(deltas, False, last_seq, room, binary)
                    assert outcome(deltas, True, last_seq, room, binary) == one_by_one, (
                        deltas,
                        last_seq,
                        room,
                        binary,
                    )


def test_a_plain_run_is_one_push() -> None:
    hub = Hub()
    subscription, connection = subscribed(hub, "a", 0)
    hub.publish_many([op("a", 1), op("a", 2), op("a", 3)])
    assert connection.pushes == 1
    assert connection.data == b"".join(EncodedDelta(op("a", s)).ws_binary() for s in (1, 2, 3))
    assert (subscription.last_seq, subscription.epoch) == (3, "e1")


def test_a_run_partly_seen_goes_delta_by_delta() -> None:
    hub = Hub()
    subscription, connection = subscribed(hub, "a", 2)
    hub.publish_many([op("a", 1), op("a", 2), op("a", 3)])
    assert connection.pushes == 1  # only seq 3 was new
    assert connection.data == EncodedDelta(op("a", 3)).ws_binary()
    assert subscription.last_seq == 3


def test_a_run_is_taken_whole_when_the_connection_has_room() -> None:
    # As a single delta may take a connection past its bound, so may a run;
    # what comes after it is skipped until the subscription resyncs.
    hub = Hub()
    subscription, connection = subscribed(hub, "a", 0, room=10)
    hub.publish_many([op("a", 1), op("a", 2), op("a", 3)])
    assert subscription.last_seq == 3 and not subscription.lag
    hub.publish(op("a", 4))
    assert subscription.last_seq == 3 and subscription.lag


def test_deltas_made_from_the_end_of_the_read_on_are_not_sent() -> None:
    # A subscription whose read ends at 100 (its token's expiry): the expiry
    # timer ends it, and until then no delta of an op made at 100 or later goes
    # out, whether it comes alone or in a run.
    def stamped(seq: int, ts: int) -> dict[str, Any]:
        return {**op("a", seq), "ts": ts}

    for many in (False, True):
        hub = Hub()
        connection = Connection()
        subscription = WsSubscription(connection, NS, "a", True, until=100)
        hub.subscribe(NS, "a", subscription)
        subscription.start([])
        deltas = [stamped(1, 98), stamped(2, 99), stamped(3, 100), stamped(4, 101)]
        if many:
            hub.publish_many(deltas)
        else:
            for delta in deltas:
                hub.publish(delta)
        # The start (nothing to send: a fresh subscription) ends with synced at 0.
        expected = synced_frame("a", 0, None) + b"".join(
            EncodedDelta(delta).ws_binary() for delta in deltas[:2]
        )
        assert connection.data == expected, many
        assert subscription.last_seq == 2
