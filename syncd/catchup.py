"""What a new subscription starts with: a replay since the client's last seq,
or a snapshot. Shared by the SSE stream and the WebSocket ``subscribe``.

A client that resumes names the life (``epoch``) and the last seq it has; when
this node still holds that life and the store still has every op after that
seq, the client gets exactly those ops, else one snapshot delta of the whole
state. Either way it then receives live deltas, deduplicated by seq.

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

    def decide() -> Start[S]:
        if covered is not None:
            covered()
        entry = engine.get(ns, crdt_id)
        if (
            since is not None
            and epoch is not None
            and entry is not None
            and entry.epoch == epoch
            and since <= entry.seq
        ):
            # entry.seq is durable here: "up to date" never counts an op in flight.
            return Start(records=[], snapshot=None) if since == entry.seq else replay
        return Start(records=None, snapshot=snapshot())

    while True:
        start = await service.durable_state(ns, crdt_id, decide, alive)
        if start is not replay:
            return start
        # Epoch and since known here: read what the store holds after since
        # (only durable records; the rest come as deltas, deduplicated by seq).
        assert since is not None and epoch is not None
        records = await service.store.ops_since(ns, crdt_id, epoch, since)
        if records is not None:
            return Start(records=records, snapshot=None)
        since = None  # no longer held: a snapshot
