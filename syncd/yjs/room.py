"""The y-websocket connections of one Yjs document on this node, and their
awareness (cursors, names, selections).

Awareness is relayed, never stored (to every connection of the room, the
sender's own included, as y-websocket's and Hocuspocus's servers do: it is
a provider's sign of life): each room keeps the latest state of each
awareness client (pycrdt's ``Awareness``, the y-protocols algorithm: a
higher clock wins, a null state removes) only so that a newcomer gets the
room's current states, and it remembers which connection announced which
clients, so that when a connection goes its clients are removed and the
room is told. A room lives while it has connections.

In a cluster the rooms of one document on every node act as one room,
through an :class:`AwarenessRelay` (the replicator's NOTIFY channel): each
update a connection sends, and each removal when it leaves, is published to
the other nodes, which apply it as *remote* and pass it to their own
connections, never on. A node that opens a room asks the others for their
states. A remote client is dropped when it is not renewed for
``REMOTE_TIMEOUT_S`` (y-protocols clients renew every 15 s), which is how
the cursors of a node that died without saying so go away.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection
from typing import Any, Final, Protocol

from pycrdt import Awareness, Doc

from syncd.yjs.protocol import Reader

log = logging.getLogger("syncd.ws")

MAX_AWARENESS_CLIENTS: Final = 64
"""Awareness clients one connection may announce. A browser tab is one; a
peer announcing many is refused (close 1008) instead of growing the room."""

MAX_AWARENESS_STATE_BYTES: Final = 64 * 1024
"""The JSON state of one awareness client a connection announces. A cursor,
a selection, a name and a colour take a few hundred bytes, an avatar as a
data URL some kilobytes; the room keeps every state for its newcomers, so
without a bound one connection held 64 states of a whole message each (64
MB, sent again to every newcomer). Over it the update is refused whole, as
over :data:`MAX_AWARENESS_CLIENTS` (close 1008): a connection holds at most
4 MiB of states."""

MAX_AWARENESS_UPDATE_CLIENTS: Final = 16 * MAX_AWARENESS_CLIENTS
"""Clients one awareness update from a connection may name; one naming more
is ignored unread. Only an update the room relays counts against the rate
limit (an echo, which changes nothing, is free), and each client is read in
Python twice (here, then by pycrdt): 110 000 null states
fit in 1 MiB and held the event loop for a second, per message. A provider
names its own clients (at most :data:`MAX_AWARENESS_CLIENTS`), or echoes
the room's states it was sent (providers send every awareness change back),
which change nothing: ignoring an echo of a room this large loses nothing."""

MAX_REMOVED_AWARENESS_CLIENTS: Final = 4096
"""Awareness clients without a state whose clock a room remembers (y-protocols
keeps each removed client's clock, so that a stale echo of its state, which
providers send back, does not bring it back). Beyond this the oldest are
forgotten: a connection naming ever new clients with null states, or
announcing and removing them in turn, grew a room without end. An echo
arrives within a round trip, long before thousands of clients come and go."""

REMOTE_TIMEOUT_S: Final = 30.0
"""A remote awareness client not renewed for this long is removed: y-protocols'
``outdatedTimeout``, after which its clients drop a silent peer too."""

REMOTE = object()
"""The origin of awareness updates from other nodes."""


class AwarenessRelay(Protocol):
    """Carries awareness to the same document's rooms on the other nodes."""

    def publish(self, ns: str, crdt_id: str, update: bytes) -> None:
        """Send an awareness update to the other nodes (best effort)."""
        ...

    def ask(self, ns: str, crdt_id: str) -> None:
        """Ask the other nodes for their states of this document's room."""
        ...


class Member(Protocol):
    def send_awareness(self, update: bytes, clients: Collection[int]) -> None:
        """Send an awareness update to this connection's peer; ``clients``
        are those it changes (a member that cannot send it now may send
        their states later instead)."""
        ...


class AwarenessRefused(Exception):
    """A connection's awareness update was malformed or over the limit."""


class AwarenessStateTooLarge(ValueError):
    """An awareness state over :data:`MAX_AWARENESS_STATE_BYTES`."""


def awareness_clients(update: bytes, max_state_bytes: int | None = None) -> set[int]:
    """The clients an awareness update gives a state (not null); ValueError
    unless it is an awareness update, whole: a count, then each client's id,
    clock and state (JSON in UTF-8), each state at most ``max_state_bytes``
    when given. Read by :class:`~syncd.yjs.protocol.Reader` before pycrdt's
    decoder, whose time grows with the square of a var-uint's length (one
    long client id would hold the event loop for as long)."""
    reader = Reader(update)
    present: set[int] = set()
    for _ in range(reader.var_uint()):  # each client takes 3 bytes at least
        client = reader.var_uint()
        reader.var_uint()  # its clock
        state = reader.byte_string()
        if max_state_bytes is not None and len(state) > max_state_bytes:
            raise AwarenessStateTooLarge(f"an awareness state over {max_state_bytes} bytes")
        if state not in (b"", b"null"):
            # Read as pycrdt will, before it applies any: it applies an update
            # client by client, so a bad state after good ones left those in
            # the room, announced by no connection and removed by nothing.
            try:
                json.loads(state.decode("utf-8"))
            except RecursionError:
                # JSON nested past the interpreter's recursion limit (the state
                # bound lets ~32,000 levels in): malformed as far as the room
                # goes, not an error that tears the connection down with 1002.
                raise ValueError("an awareness state nested too deep") from None
            present.add(client)
    return present


def _changed(changes: dict[str, Any]) -> list[int]:
    """The clients an applied update added, updated or removed."""
    return [*changes.get("added", ()), *changes.get("updated", ()), *changes.get("removed", ())]


class Room:
    __slots__ = (
        "_announced",
        "_announcer",
        "_relay",
        "_remote",
        "awareness",
        "crdt_id",
        "members",
        "ns",
    )

    def __init__(self, ns: str, crdt_id: str, relay: AwarenessRelay | None = None) -> None:
        self.ns = ns
        self.crdt_id = crdt_id
        self.members: set[Member] = set()
        self.awareness = Awareness(Doc())
        self._announced: dict[Member, set[int]] = {}
        self._announcer: dict[int, Member] = {}
        """The connection each announced client's state last came from: its
        leaving removes only the clients still its own."""
        self._remote: dict[int, float] = {}
        """Awareness clients from other nodes: when each was last renewed."""
        self._relay = relay

    def states(self) -> bytes | None:
        """Every live awareness state as one update, or None when there is none."""
        own = self.awareness.client_id  # pycrdt gives the room a local state: not a peer's
        ids = [i for i in self.awareness.states if i != own]
        return self.awareness.encode_awareness_update(ids) if ids else None

    def states_of(self, clients: Collection[int]) -> bytes | None:
        """The current awareness of ``clients`` as one update (None: none of
        them is known): each one's state, or null at its clock for one
        removed, so that a peer that missed their changes ends as the room
        is. Clients the room forgot (see :data:`MAX_REMOVED_AWARENESS_CLIENTS`)
        are left out."""
        meta = self.awareness.meta
        own = self.awareness.client_id
        ids = sorted(c for c in clients if c in meta and c != own)
        return self.awareness.encode_awareness_update(ids) if ids else None

    def local_states(self) -> bytes | None:
        """The states this node's connections announced (what other nodes ask for)."""
        held = self.awareness.states
        ids = sorted(i for i in self._announcer if i in held)
        return self.awareness.encode_awareness_update(ids) if ids else None

    def _apply(self, update: bytes, origin: object, *, checked: bool = False) -> dict[str, Any]:
        """Apply ``update`` (read whole by :func:`awareness_clients` first,
        unless the caller did: ``checked``); the changes it made."""
        changes: dict[str, Any] = {}

        def observed(topic: str, event: tuple[dict[str, Any], Any]) -> None:
            if topic == "update":
                changes.update(event[0])

        subscription = self.awareness.observe(observed)
        try:
            if not checked:
                awareness_clients(update)
            self.awareness.apply_awareness_update(update, origin)
        except Exception as exc:  # JSON and lib0 decoding of peer bytes
            raise AwarenessRefused("malformed awareness update") from exc
        finally:
            self.awareness.unobserve(subscription)
        self._forget_removed()
        return changes

    def _forget_removed(self) -> None:
        """Keep at most :data:`MAX_REMOVED_AWARENESS_CLIENTS` clocks of clients
        without a state, the oldest forgotten first (down to half, so this
        runs once per that many removals, not per update)."""
        meta = self.awareness.meta
        held = self.awareness.states
        if len(meta) - len(held) <= MAX_REMOVED_AWARENESS_CLIENTS:
            return
        excess = len(meta) - len(held) - MAX_REMOVED_AWARENESS_CLIENTS // 2
        for client in [c for c in meta if c not in held][:excess]:
            del meta[client]

    def _would_announce(self, member: Member, present: set[int]) -> int:
        """How many clients ``member`` holds once an update giving ``present`` a state
        is applied: those it announced, and those new to the room. A client
        the room already has a state of is not one more: providers
        (y-websocket, ``@hocuspocus/provider``) send every awareness change
        back on the socket whatever its origin, so a newcomer echoes the
        room's states it was just sent, other connections' clients; counted
        as its own, a room of more than :data:`MAX_AWARENESS_CLIENTS` closed
        every provider that joined it."""
        mine = self._announced.get(member, set())
        held = self.awareness.states
        return len(mine) + sum(1 for c in present if c not in mine and c not in held)

    def apply(self, member: Member, update: bytes) -> bool:
        """Apply ``member``'s awareness update and relay it to the room,
        ``member`` included (see below); one that would take ``member`` past
        :data:`MAX_AWARENESS_CLIENTS`, or with a state over
        :data:`MAX_AWARENESS_STATE_BYTES`, is refused whole, before anyone
        sees it. Whether it was relayed (it changed the room: what the
        channel counts against the token's rate limit)."""
        try:
            if Reader(update).var_uint() > MAX_AWARENESS_UPDATE_CLIENTS:
                return False  # unread: an echo of a large room at best (see the constant)
            present = awareness_clients(update, MAX_AWARENESS_STATE_BYTES)
        except AwarenessStateTooLarge as exc:
            raise AwarenessRefused(str(exc)) from exc
        except ValueError as exc:
            raise AwarenessRefused("malformed awareness update") from exc
        if self._would_announce(member, present) > MAX_AWARENESS_CLIENTS:
            raise AwarenessRefused(f"over {MAX_AWARENESS_CLIENTS} awareness clients")
        changes = self._apply(update, member, checked=True)
        if not changes:
            return False
        for client in (*changes.get("added", ()), *changes.get("updated", ())):
            self._announced_by(client, member)
        for client in changes.get("removed", ()):
            self._announced_by(client, None)
        changed = _changed(changes)
        # To ``member`` too, as y-websocket's and Hocuspocus's servers do: a
        # provider takes only a message as a sign of life and reconnects
        # after 30 s without one, counting on its own awareness (renewed
        # every 15 s) coming back; alone in its room it got nothing else.
        for each in self.members:
            each.send_awareness(update, changed)
        if self._relay is not None:
            self._relay.publish(self.ns, self.crdt_id, update)
        return True

    def _announced_by(self, client: int, member: Member | None) -> None:
        """``client``'s state now comes from ``member`` (None: from no
        connection here, removed or from another node). A provider that
        reconnects announces its client on the new connection while the old
        one may linger until its keepalive ends it; the old one's leaving
        must not remove the client the new one holds."""
        before = self._announcer.get(client)
        if before is member:
            return
        if before is not None:
            self._announced[before].discard(client)
        if member is None:
            del self._announcer[client]
        else:
            self._announcer[client] = member
            self._announced.setdefault(member, set()).add(client)
            self._remote.pop(client, None)  # here now: not expired as another node's

    def apply_remote(self, update: bytes, now: float) -> None:
        """Apply an update from another node and pass it to every connection here."""
        changes = self._apply(update, REMOTE)
        if not changes:
            return
        for client in (*changes.get("added", ()), *changes.get("updated", ())):
            self._remote[client] = now
            self._announced_by(client, None)
        for client in changes.get("removed", ()):
            self._remote.pop(client, None)
            self._announced_by(client, None)
        changed = _changed(changes)
        for member in self.members:
            member.send_awareness(update, changed)

    def expire(self, now: float, timeout: float = REMOTE_TIMEOUT_S) -> None:
        """Remove the remote clients not renewed within ``timeout`` and tell the room."""
        stale = [client for client, seen in self._remote.items() if now - seen > timeout]
        if not stale:
            return
        for client in stale:
            del self._remote[client]
        ids = [client for client in stale if client in self.awareness.states]
        if not ids:
            return
        self.awareness.remove_awareness_states(ids, None)
        update = self.awareness.encode_awareness_update(ids)
        self._forget_removed()
        for member in self.members:
            member.send_awareness(update, ids)

    @property
    def has_remote(self) -> bool:
        return bool(self._remote)

    def leave(self, member: Member) -> None:
        """``member`` is gone: remove what it announced and tell the others."""
        self.members.discard(member)
        mine = self._announced.pop(member, set())
        for client in mine:
            del self._announcer[client]
        ids = [i for i in mine if i in self.awareness.states]
        if not ids:
            return
        self.awareness.remove_awareness_states(ids, None)
        update = self.awareness.encode_awareness_update(ids)
        self._forget_removed()
        for other in self.members:
            other.send_awareness(update, ids)
        if self._relay is not None:
            self._relay.publish(self.ns, self.crdt_id, update)


class Rooms:
    """Every room of this node, by (namespace, document id)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._rooms: dict[tuple[str, str], Room] = {}
        self._clock = clock
        self.relay: AwarenessRelay | None = None
        """Set by app.py in a cluster, before the server accepts connections."""

    def join(self, ns: str, crdt_id: str, member: Member) -> Room:
        room = self._rooms.get((ns, crdt_id))
        if room is None:
            room = self._rooms[(ns, crdt_id)] = Room(ns, crdt_id, self.relay)
            if self.relay is not None:
                self.relay.ask(ns, crdt_id)
        room.members.add(member)
        return room

    def leave(self, ns: str, crdt_id: str, member: Member) -> None:
        room = self._rooms.get((ns, crdt_id))
        if room is None:
            return
        room.leave(member)
        if not room.members:
            del self._rooms[(ns, crdt_id)]

    def __len__(self) -> int:
        return len(self._rooms)

    # -- from other nodes (the relay) -------------------------------------------

    def remote_update(self, ns: str, crdt_id: str, update: bytes) -> None:
        """Another node's awareness update: for this node's room, if it has one."""
        room = self._rooms.get((ns, crdt_id))
        if room is None:
            return
        try:
            room.apply_remote(update, self._clock())
        except AwarenessRefused:
            log.warning("ignoring a malformed awareness update from another node")

    def remote_query(self, ns: str, crdt_id: str) -> None:
        """Another node opened a room: send it this node's states, if any."""
        room = self._rooms.get((ns, crdt_id))
        if room is None or self.relay is None:
            return
        states = room.local_states()
        if states is not None:
            self.relay.publish(ns, crdt_id, states)

    def expire(self) -> None:
        """Drop the remote clients that stopped renewing (their node may be gone)."""
        now = self._clock()
        for room in list(self._rooms.values()):
            if room.has_remote:
                room.expire(now)
