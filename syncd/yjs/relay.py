"""The awareness relay: this node's Yjs rooms joined to the same documents'
rooms on the other nodes of a cluster.

Theory of operation
-------------------
Yjs cursors and names are not data: they travel on the cluster's NOTIFY
channel (``aw`` updates, ``awq`` queries, :mod:`syncd.cluster.notify`) but
never through the tables. :class:`ClusterAwarenessRelay` is the rooms'
:class:`~syncd.yjs.room.AwarenessRelay`: what a room publishes is packed
with this node's sender name and queued in an outbox, which one task sends
in batches through the cluster's one small publish interface
(:class:`NodeChannel`, the replicator's :meth:`notify`, on a connection of
its own so a busy pool does not hold cursors back). Best effort: when
PostgreSQL is away or the outbox is full an update is dropped (counted), and
the client's next one (at most 15 s later) replaces it.

The other way, the replicator hands the other nodes' notices to
:meth:`remote_update` and :meth:`remote_query`, which pass them to the
rooms. The same task sweeps the rooms every :data:`AWARENESS_SWEEP_S`, so
remote clients that stop renewing (their node died) go away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Final, Protocol

from syncd.cluster.notify import pack_awareness, pack_awareness_query
from syncd.yjs.room import Rooms

log = logging.getLogger("syncd.cluster")

AWARENESS_OUTBOX_MAX: Final = 1024
"""Awareness notices waiting for the speaking connection; beyond this they are
dropped (counted): a cursor's next move replaces a lost one."""

AWARENESS_SWEEP_S: Final = 1.0
"""How often the rooms drop remote awareness clients that stopped renewing."""

AWARENESS_RETRY_S: Final = 1.0
"""Pause after sending failed, before the next attempt."""


class AwarenessCounters(Protocol):
    awareness_sent: int
    """Awareness notices (updates and queries) this node sent."""
    awareness_dropped: int
    """Awareness notices not sent: too large, outbox full, or PostgreSQL away."""


class NodeChannel(Protocol):
    """What the relay needs of the cluster (the replicator): its name on the
    channel, its counters, and a way to publish notices to the other nodes."""

    @property
    def sender(self) -> str: ...

    @property
    def stats(self) -> AwarenessCounters: ...

    async def notify(self, payloads: Sequence[str]) -> None:
        """Send these notices to the other nodes at once; raises when it could not."""
        ...


class ClusterAwarenessRelay:
    """The rooms' relay to the other nodes, and the other nodes' to the rooms."""

    def __init__(self, rooms: Rooms, channel: NodeChannel) -> None:
        self._rooms = rooms
        self._channel = channel
        self._outbox: list[str] = []
        self._outbox_ready = asyncio.Event()
        self._speaker: asyncio.Task[None] | None = None
        self._closed = False

    def start(self) -> None:
        """Begin sending and sweeping; call once the cluster has started."""
        self._speaker = asyncio.get_running_loop().create_task(self._speak())

    async def close(self) -> None:
        self._closed = True
        if self._speaker is not None:
            self._speaker.cancel()
            with contextlib.suppress(BaseException):
                await self._speaker

    # -- from the rooms (AwarenessRelay) -------------------------------------

    def publish(self, ns: str, crdt_id: str, update: bytes) -> None:
        payload = pack_awareness(self._channel.sender, ns, crdt_id, update)
        if payload is None:
            self._channel.stats.awareness_dropped += 1
            return
        self._send(payload)

    def ask(self, ns: str, crdt_id: str) -> None:
        self._send(pack_awareness_query(self._channel.sender, ns, crdt_id))

    # -- from the other nodes (the replicator) -------------------------------

    def remote_update(self, ns: str, crdt_id: str, update: bytes) -> None:
        self._rooms.remote_update(ns, crdt_id, update)

    def remote_query(self, ns: str, crdt_id: str) -> None:
        """Another node opened a room on this document: publish our states."""
        self._rooms.remote_query(ns, crdt_id)

    # -- the outbox ----------------------------------------------------------

    def _send(self, payload: str) -> None:
        if self._closed or self._speaker is None:
            return
        if len(self._outbox) >= AWARENESS_OUTBOX_MAX:
            self._channel.stats.awareness_dropped += 1
            return
        self._outbox.append(payload)
        self._outbox_ready.set()

    async def _speak(self) -> None:
        """Send the outbox in batches, and sweep the rooms now and then."""
        channel = self._channel
        next_sweep = time.monotonic() + AWARENESS_SWEEP_S
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                wait = max(0.0, next_sweep - time.monotonic())
                await asyncio.wait_for(self._outbox_ready.wait(), wait)
            if time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + AWARENESS_SWEEP_S
                self._rooms.expire()
            self._outbox_ready.clear()
            payloads, self._outbox = self._outbox, []
            if not payloads:
                continue
            try:
                await channel.notify(payloads)
                channel.stats.awareness_sent += len(payloads)
            except Exception as exc:
                channel.stats.awareness_dropped += len(payloads)
                log.debug("awareness not sent to other nodes: %s", str(exc).strip())
                await asyncio.sleep(AWARENESS_RETRY_S)
