"""The y-websocket connections of one Yjs document on this node, and their
awareness (cursors, names, selections).

Awareness is relayed, never stored: each room keeps the latest state of each
awareness client (pycrdt's ``Awareness``, the y-protocols algorithm: a
higher clock wins, a null state removes) only so that a newcomer gets the
room's current states, and it remembers which connection announced which
clients, so that when a connection goes its clients are removed and the
room is told. A room lives while it has connections.

Awareness is per node: in a cluster, providers on different nodes see each
other's document edits (those go through the database) but not each other's
cursors.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from pycrdt import Awareness, Doc

MAX_AWARENESS_CLIENTS: Final = 64
"""Awareness clients one connection may announce. A browser tab is one; a
peer announcing many is refused (close 1008) instead of growing the room."""


class Member(Protocol):
    def send_awareness(self, update: bytes) -> None:
        """Send an awareness update to this connection's peer."""
        ...


class AwarenessRefused(Exception):
    """A connection's awareness update was malformed or over the limit."""


class Room:
    __slots__ = ("_announced", "awareness", "members")

    def __init__(self) -> None:
        self.members: set[Member] = set()
        self.awareness = Awareness(Doc())
        self._announced: dict[Member, set[int]] = {}

    def states(self) -> bytes | None:
        """Every live awareness state as one update, or None when there is none."""
        own = self.awareness.client_id  # pycrdt gives the room a local state: not a peer's
        ids = [i for i in self.awareness.states if i != own]
        return self.awareness.encode_awareness_update(ids) if ids else None

    def apply(self, member: Member, update: bytes) -> None:
        """Apply ``member``'s awareness update and relay it to the others."""
        changes: dict[str, Any] = {}

        def observed(topic: str, event: tuple[dict[str, Any], Any]) -> None:
            if topic == "update":
                changes.update(event[0])

        subscription = self.awareness.observe(observed)
        try:
            self.awareness.apply_awareness_update(update, member)
        except Exception as exc:  # JSON and lib0 decoding of peer bytes
            raise AwarenessRefused("malformed awareness update") from exc
        finally:
            self.awareness.unobserve(subscription)
        if not changes:
            return
        announced = self._announced.setdefault(member, set())
        announced.update(changes.get("added", ()))
        announced.update(changes.get("updated", ()))
        announced.difference_update(changes.get("removed", ()))
        for other in self.members:
            if other is not member:
                other.send_awareness(update)
        if len(announced) > MAX_AWARENESS_CLIENTS:
            raise AwarenessRefused(f"over {MAX_AWARENESS_CLIENTS} awareness clients")

    def leave(self, member: Member) -> None:
        """``member`` is gone: remove what it announced and tell the others."""
        self.members.discard(member)
        ids = [i for i in self._announced.pop(member, ()) if i in self.awareness.states]
        if not ids:
            return
        self.awareness.remove_awareness_states(ids, None)
        update = self.awareness.encode_awareness_update(ids)
        for other in self.members:
            other.send_awareness(update)


class Rooms:
    """Every room of this node, by (namespace, document id)."""

    def __init__(self) -> None:
        self._rooms: dict[tuple[str, str], Room] = {}

    def join(self, ns: str, crdt_id: str, member: Member) -> Room:
        room = self._rooms.get((ns, crdt_id))
        if room is None:
            room = self._rooms[(ns, crdt_id)] = Room()
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
