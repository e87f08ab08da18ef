"""What a new subscription starts with: a replay since the client's last seq,
or a snapshot. Shared by the SSE stream and the WebSocket ``subscribe``.

A client that resumes names the life (``epoch``) and the last seq it has; when
this node still holds that life and the store still has every op after that
seq, the client gets exactly those ops, else one snapshot delta of the whole
state. Either way it then receives live deltas, deduplicated by seq.
"""

from __future__ import annotations

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
    entry = await residency.ensure(ns, crdt_id)
    if (
        since is not None
        and epoch is not None
        and entry is not None
        and entry.epoch == epoch
        and since <= entry.seq
    ):
        if since == entry.seq:
            return []  # the client is up to date
        records = await store.ops_since(ns, crdt_id, epoch, since)
        if records is not None:
            return records
    return [engine.snapshot_delta(ns, crdt_id)]
