"""What a new subscription starts with: a replay since the client's last seq,
or a snapshot. Shared by the SSE stream and the WebSocket ``subscribe``.

A client that resumes names the life (``epoch``) and the last seq it has; when
this node still holds that life and the store still has every op after that
seq, the client gets exactly those ops, else one snapshot delta of the whole
state. Either way it then receives live deltas, deduplicated by seq. A seq
ahead of this node's is the store's to judge: on a shared store another node
may have made it (this one follows a little behind), and the client is up to
date with the ops after it; else it is ahead of every node, and gets a snapshot.

The start is decided, and the snapshot taken, where what memory holds of the
CRDT is durable (:meth:`CrdtService.durable_state`): never from ops in flight,
which a failed write would take back while the subscriber keeps them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from syncd.service import CrdtService

S = TypeVar("S")


def _always() -> bool:
    return True


@dataclass(frozen=True, slots=True)
class Start(Generic[S]):
    """A subscription's start: the op records to replay (``[]``: the client is
    up to date), or else the snapshot that was taken."""

    records: list[dict[str, Any]] | None
    snapshot: S | None


async def initial_deltas(
    service: CrdtService, ns: str, crdt_id: str, since: int | None, epoch: str | None
) -> list[dict[str, Any]]:
    """The replay after ``since`` when the store still has it for this epoch, else
    a snapshot delta. The caller has subscribed already: that keeps the CRDT resident."""
    engine = service.engine
    start = await start_from(
        service, ns, crdt_id, since, epoch, lambda: engine.snapshot_delta(ns, crdt_id)
    )
    assert start is not None  # alive() is always True here
    if start.records is not None:
        return start.records
    assert start.snapshot is not None
    return [start.snapshot]


async def start_from(
    service: CrdtService,
    ns: str,
    crdt_id: str,
    since: int | None,
    epoch: str | None,
    snapshot: Callable[[], S],
    covered: Callable[[], None] | None = None,
    alive: Callable[[], bool] = _always,
) -> Start[S] | None:
    """The replay after ``since`` when this life is held and the store still
    has it, else what ``snapshot()`` takes (called in the step the start is
    decided, the CRDT in memory); None when ``alive()`` turned False first.

    ``covered`` is called in that same step: the deltas the subscriber was
    handed until then are in what it starts from (each reached the engine
    before it was published), so it drops them. A ``deleted`` among them
    ended an earlier life than the one it starts with, and only this tells it
    apart (it has no seq)."""
    engine = service.engine
    replay: Start[S] = Start(records=None, snapshot=None)  # "read the ops after since"
    held = -1
    """Where memory is when the client is ahead of it (-1: it is not)."""

    def decide() -> Start[S]:
        nonlocal held
        if covered is not None:
            covered()
        entry = engine.get(ns, crdt_id)
        if since is not None and epoch is not None and entry is not None and entry.epoch == epoch:
            # entry.seq is durable here: "up to date" never counts an op in flight.
            if since == entry.seq:
                return Start(records=[], snapshot=None)
            # Ahead: this node may follow a shared store a little behind the
            # node the client had its ops from; the store tells.
            held = entry.seq if since > entry.seq else -1
            return replay
        return Start(records=None, snapshot=snapshot())

    while True:
        start = await service.durable_state(ns, crdt_id, decide, alive)
        if start is not replay:
            return start
        # Epoch and since known here: read what the store holds after since
        # (only durable records; the rest come as deltas, deduplicated by seq).
        assert since is not None and epoch is not None
        if held < 0:
            records = await service.store.ops_since(ns, crdt_id, epoch, since)
            if records is not None:
                return Start(records=records, snapshot=None)
        else:
            # The store has the client's seq: it is up to date with the ops
            # after it, and this node's own deltas up to since are skipped by
            # seq. Else it is ahead of every node (ops a crash took back).
            records = await service.store.ops_since(ns, crdt_id, epoch, held)
            if records and records[-1]["seq"] >= since:
                return Start(records=[r for r in records if r["seq"] > since], snapshot=None)
        since = None  # no longer held: a snapshot
