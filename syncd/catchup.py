"""What a new subscription starts with: a replay since the client's last seq,
or a snapshot. Shared by the SSE stream and the WebSocket ``subscribe``.

A client that resumes names the life (``epoch``) and the last seq it has; when
this node still holds that life and the store still has every op after that
seq, the client gets exactly those ops, else one snapshot delta of the whole
state. Either way it then receives live deltas, deduplicated by seq.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from syncd.crdt.engine import Engine
from syncd.residency import Residency
from syncd.store.base import Store


async def initial_deltas(
    engine: Engine,
    store: Store,
    residency: Residency,
    ns: str,
    crdt_id: str,
    since: int | None,
    epoch: str | None,
) -> list[dict[str, Any]]:
    """The replay after ``since`` when the store still has it for this epoch, else
    a snapshot. The caller has subscribed already: that keeps the CRDT resident."""
    records = await replay(store, residency, ns, crdt_id, since, epoch)
    return records if records is not None else [engine.snapshot_delta(ns, crdt_id)]


async def replay(
    store: Store,
    residency: Residency,
    ns: str,
    crdt_id: str,
    since: int | None,
    epoch: str | None,
    covered: Callable[[], None] | None = None,
) -> list[dict[str, Any]] | None:
    """:func:`initial_deltas`' replay, or None where it would be a snapshot: the
    CRDT is then in memory, and the caller takes its snapshot from the engine
    before it next awaits (a large one is shared, syncd/shared_states.py).

    ``covered`` is called once the entry the start is decided on is in hand:
    the deltas the subscriber was handed until then are in what it starts
    from (each reached the engine before it was published), so it drops
    them. A ``deleted`` among them ended an earlier life than the one it
    starts with, and only this tells it apart (it has no seq)."""
    entry = await residency.ensure(ns, crdt_id)
    if covered is not None:
        covered()
    if (
        since is not None
        and epoch is not None
        and entry is not None
        and entry.epoch == epoch
        and since <= entry.seq
    ):
        if since == entry.seq:
            return []  # the client is up to date
        return await store.ops_since(ns, crdt_id, epoch, since)
    return None
