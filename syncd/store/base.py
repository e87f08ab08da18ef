"""The storage interface: it orders, persists and acknowledges; it never interprets a CRDT.

Records
-------
The engine produces *op records*, plain msgpack-able maps::

    {"kind": "op", "ns": str, "id": str, "type": str, "seq": int, "epoch": str,
     "client_id": int, "ts": int, "op": {...delta op...}, "op_id": str | None}

and *delete records*::

    {"kind": "deleted", "ns": str, "id": str}

A snapshot is a sequence of *entry maps* exported by the engine (opaque here)::

    {"ns", "id", "type", "seq", "epoch", "state", "op_ids": [...]}

Recovery hands back the newest snapshot's entries, then every record written
after it, in the order they were appended; the application feeds them to the
engine (``Engine.import_entry`` then ``Engine.replay``) as it iterates them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

Record = dict[str, Any]
SnapshotSource = Callable[[], Iterable[dict[str, Any]]]


@dataclass
class Recovered:
    """What a store found on disk (or in the database) at start-up."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    records: Sequence[Record] = field(default_factory=list)
    """In log order. It may decode its records while it is iterated (``FileStore``
    does, a chunk at a time): iterate it once, and keep only what is needed."""


class Store(Protocol):
    async def open(self) -> Recovered:
        """Open (lock, recover, repair a torn tail) and return the state to load."""
        ...

    def set_snapshot_source(self, source: SnapshotSource) -> None:
        """Give the store a way to read every CRDT's entry map when it compacts."""
        ...

    async def append(self, records: Sequence[Record]) -> None:
        """Persist ``records`` in order. Returns once they are durable (per the fsync
        mode); raises ``ApiError(503, "unavailable")`` when they are not."""
        ...

    async def ops_since(self, ns: str, crdt_id: str, epoch: str, since: int) -> list[Record] | None:
        """Every op record of this CRDT life with seq > ``since``, or None when the
        store no longer holds all of them (the caller then sends a snapshot)."""
        ...

    @property
    def ready(self) -> bool:
        """False while writes would fail (disk full, database down)."""
        ...

    @property
    def wal_last_seq(self) -> int:
        """The last durable log sequence number."""
        ...

    async def reload(self) -> Recovered:
        """Read the durable state again (after a write failure left memory ahead of it)."""
        ...

    async def close(self) -> None:
        """Flush what is pending and release the data dir / connections."""
        ...
