"""One CRDT subscribed to over one WebSocket connection: the hub's subscriber.

The hub calls :meth:`WsSubscription.deliver` once per durable delta with the
delta encoded once for everyone; the shared frame bytes go to the connection
as they are (queued there and coalesced into one send per flush, see
:mod:`syncd.ws.flusher`). Three things can stop a frame:

- the subscription is still *starting* (its snapshot or replay is being read):
  deltas wait in a list and are flushed, minus what the start covered, after it;
- it is *lagging*: the transport held more than its bound of unsent bytes, so
  deltas are skipped until the transport drains and :meth:`resync` sends a
  fresh snapshot (the client sees ``seq`` jump and knows it skipped some);
- the delta is already covered (``seq`` not above what was sent, same epoch);
- the read has ended: the op was made (its ``ts``) at or after the end of the
  read (the token's or its rule's expiry). The connection's expiry timer ends
  the subscription at that instant; this check, an int comparison with no
  clock read, covers a delta that reaches us before the timer has had its turn.

The start (the snapshot, the replay, or nothing when the client resumes up to
date) ends with one ``synced`` message (``kind, ns, id, seq, epoch``: where
the start left the client), before any live delta: a client tells "caught
up" from "still waiting" by it. Once per subscribe, never per delta; a
resync's snapshot is not a start and sends none, unless the start itself fell
behind (a replay larger than the bound, to a peer not reading it): then that
snapshot ends the start, and ``synced`` follows it rather than the replay.

A snapshot (the start without a replay, a resync) is encoded once per
version of the CRDT and form (msgpack or JSON) when large, and the same bytes
go to every subscription sent that version (:mod:`syncd.shared_states`),
written in slices as each socket drains; deltas after it wait behind it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from syncd.auth.authenticator import NO_END_MS
from syncd.hub import EncodedDelta, EncodedRun
from syncd.wire import WS_OPCODE_BINARY, WS_OPCODE_TEXT, pack, to_json, ws_header
from syncd.ws.codec import encode

if TYPE_CHECKING:
    from syncd.crdt.engine import Engine
    from syncd.shared_states import SharedStates

log = logging.getLogger("syncd.ws")

SNAPSHOT_BINARY: Final = "ws:snapshot:msgpack"
SNAPSHOT_TEXT: Final = "ws:snapshot:json"
"""The shared forms of a snapshot delta: a binary frame's payload, a text frame's."""


class Writer(Protocol):
    """What a subscription needs from its connection."""

    def push(self, data: bytes, subscription: WsSubscription) -> bool:
        """Queue a broadcast frame. False (and nothing queued) when the
        connection is closing or is over its bound; in the latter case it has
        marked ``subscription`` lagging and will :meth:`~WsSubscription.resync` it."""
        ...

    def send(self, data: bytes) -> None:
        """Send now, in order after anything queued (nothing once closing)."""
        ...

    def feed(self, head: bytes, state: bytes | bytearray) -> None:
        """Send ``head`` and ``state`` (maybe shared with other connections) as
        ``send`` would their concatenation, without copying ``state``."""
        ...


@dataclass(frozen=True, slots=True)
class TakenSnapshot:
    """A snapshot delta taken from the engine, not yet sent: its frame (``head``
    alone, or ``head`` then the maybe shared ``payload``; None when it could
    not be encoded) and the seq and epoch it is at."""

    head: bytes | None
    payload: bytes | bytearray | None
    seq: int
    epoch: str | None


class WsSubscription:
    __slots__ = (
        "_writer",
        "active",
        "binary",
        "crdt_id",
        "epoch",
        "lag",
        "last_seq",
        "ns",
        "pending",
        "synced",
        "until",
    )

    def __init__(
        self,
        writer: Writer,
        ns: str,
        crdt_id: str,
        binary: bool,
        until: int | None = None,
        *,
        since: int | None = None,
        epoch: str | None = None,
    ) -> None:
        self._writer = writer
        self.ns = ns
        self.crdt_id = crdt_id
        self.binary = binary
        """Deltas go out as msgpack binary frames, else as JSON text frames."""
        resuming = since is not None and epoch is not None
        self.last_seq = since if since is not None and resuming else 0
        """The last seq sent; at first where the client resumes from (what a
        replay, or nothing when it is up to date, goes on from)."""
        self.epoch: str | None = epoch if resuming else None
        self.synced = False
        """The ``synced`` message that ends the start has gone out."""
        self.pending: list[EncodedDelta] | None = []
        """Deltas that arrived before the start; None once started."""
        self.lag = False
        self.active = True
        self.until = NO_END_MS if until is None else until
        """When the read ends (wall-clock ms): deltas of ops made from then on
        are never sent."""

    def deliver(self, encoded: EncodedDelta) -> None:
        pending = self.pending
        if pending is not None:
            pending.append(encoded)
            return
        if self.lag:
            return
        seq = encoded.seq
        delta = encoded.delta
        if seq <= self.last_seq and (delta["kind"] == "op" and delta["epoch"] == self.epoch):
            return
        if delta.get("ts", 0) >= self.until:
            return  # made after the read ended; the expiry timer ends us
        try:
            frame = encoded.ws_binary() if self.binary else encoded.ws_text()
        except (TypeError, ValueError, OverflowError):
            self._unencodable()
            return
        if not self._writer.push(frame, self):
            return
        if seq:
            self.last_seq = seq
            self.epoch = delta["epoch"]
        else:  # deleted: the next life starts again at seq 1
            self.last_seq = 0
            self.epoch = None

    def deliver_run(self, run: EncodedRun) -> None:
        """Consecutive deltas of this CRDT: as ``deliver`` for each of them, in
        one push when this subscription is past none of them. The push is
        taken whole or refused whole: a connection just under its bound may
        end one run past it, as it may end one delta past it."""
        if (
            self.pending is None
            and not self.lag
            and run.plain
            and run.first_seq > self.last_seq
            and run.last_ts < self.until
        ):
            try:
                frames = run.ws_binary() if self.binary else run.ws_text()
            except (TypeError, ValueError, OverflowError):
                pass  # one of them cannot be encoded: delta by delta below
            else:
                if self._writer.push(frames, self):
                    self.last_seq = run.last_seq
                    self.epoch = run.epoch
                return
        for encoded in run.items:
            self.deliver(encoded)

    def start(self, initial: list[dict[str, Any]]) -> None:
        """Send the snapshot or replay, then the deltas that arrived meanwhile."""
        pending = self.pending
        if not self.active or pending is None:
            return
        self.pending = None
        for delta in initial:
            if delta.get("kind") == "snapshot":
                self._send_snapshot(delta)
            else:
                self.deliver(EncodedDelta(delta))
        self._send_synced()
        for encoded in pending:
            self.deliver(encoded)

    def covered(self) -> None:
        """The deltas that arrived so far are in what this starts from (each
        reached the engine before it was published): drop them."""
        if self.pending is not None:
            self.pending.clear()

    def start_snapshot(self, engine: Engine, shared: SharedStates) -> None:
        """Start from the CRDT's current state, which the caller knows to be
        durable (``CrdtService.durable_now``). The deltas that arrived meanwhile
        are not sent: each reached the engine before it was published, so the
        snapshot holds them all (a ``deleted`` among them, of a life that ended
        before the snapshot's, cannot be told apart by seq)."""
        self.covered()
        self.start_taken(self.take_snapshot(engine, shared))

    def start_taken(self, taken: TakenSnapshot) -> None:
        """Start from ``taken`` (now durable), then send the deltas that arrived
        since it was taken: those it covers are skipped by seq."""
        pending = self.pending
        if not self.active or pending is None:
            return
        self.pending = None
        self._send_taken(taken)
        self._send_synced()
        for encoded in pending:
            self.deliver(encoded)

    def take_snapshot(self, engine: Engine, shared: SharedStates) -> TakenSnapshot:
        """The CRDT's current state as a snapshot delta's frame, to send now or
        once it is durable: when large, the frame payload every subscription
        sent this version writes (see the module docstring)."""
        entry = engine.get(self.ns, self.crdt_id)
        if entry is None:  # unknown: a snapshot of nothing, small
            delta = engine.snapshot_delta(self.ns, self.crdt_id)
            frame = self._frame(EncodedDelta(delta))
            return TakenSnapshot(frame, None, delta.get("seq") or 0, delta.get("epoch"))
        ns, crdt_id = self.ns, self.crdt_id
        try:
            if self.binary:
                opcode = WS_OPCODE_BINARY
                payload = shared.exact(
                    entry, SNAPSHOT_BINARY, lambda: pack(engine.snapshot_delta(ns, crdt_id))
                )
            else:
                opcode = WS_OPCODE_TEXT
                payload = shared.exact(
                    entry, SNAPSHOT_TEXT, lambda: to_json(engine.snapshot_delta(ns, crdt_id))
                )
        except (TypeError, ValueError, OverflowError):
            self._unencodable()
            return TakenSnapshot(None, None, entry.seq, entry.epoch)
        return TakenSnapshot(ws_header(opcode, len(payload)), payload, entry.seq, entry.epoch)

    def _send_taken(self, taken: TakenSnapshot) -> None:
        if taken.head is not None:
            if taken.payload is None:
                self._writer.send(taken.head)
            else:
                self._writer.feed(taken.head, taken.payload)
        self.last_seq = taken.seq
        self.epoch = taken.epoch

    def _frame(self, encoded: EncodedDelta) -> bytes | None:
        try:
            return encoded.ws_binary() if self.binary else encoded.ws_text()
        except (TypeError, ValueError, OverflowError):
            self._unencodable()
            return None

    def _unencodable(self) -> None:
        # A bug elsewhere made a delta that cannot be encoded: it is lost to
        # this subscriber, never the fan-out loop to everyone after it.
        log.exception("cannot encode a delta of %s/%s", self.ns, self.crdt_id)

    def resync(self, engine: Engine, shared: SharedStates) -> None:
        """The transport drained after we skipped deltas: a fresh snapshot (the
        caller knows the CRDT's state to be durable, ``CrdtService.durable_now``)."""
        if not self.active or not self.lag:
            return
        self.lag = False
        self._send_taken(self.take_snapshot(engine, shared))
        self._send_synced()  # a start that fell behind ends here

    def resync_later(self) -> bool:
        """As :meth:`resync`, but the CRDT's state is not durable yet: deltas wait
        as at the start until the caller has a durable snapshot for
        :meth:`start_taken`. False when there is nothing to resync."""
        if not self.active or not self.lag or self.pending is not None:
            return False
        self.lag = False
        self.pending = []
        return True

    def _send_synced(self) -> None:
        """End the start (once per subscription; a resync's snapshot is no
        start): ``synced`` at the position the start brought the client to,
        before any live delta. Up to date, the start was nothing but this.

        A replay that fell behind (the socket over its bound: the rest of it
        and what came meanwhile are skipped) has not brought the client to
        where it subscribed: its start ends with the resync's snapshot, and
        ``synced`` waits for that."""
        if self.synced or self.lag:
            return
        self.synced = True
        message = {
            "kind": "synced",
            "ns": self.ns,
            "id": self.crdt_id,
            "seq": self.last_seq,
            "epoch": self.epoch,
        }
        self._writer.send(encode(message, self.binary))

    def _send_snapshot(self, delta: dict[str, Any]) -> None:
        frame = self._frame(EncodedDelta(delta))
        if frame is not None:
            self._writer.send(frame)
        self.last_seq = delta.get("seq") or 0
        self.epoch = delta.get("epoch")
