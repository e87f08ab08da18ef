"""Pages of a CRDT's retained ops (``GET .../history``), all or one writer's.

Theory of operation
-------------------
The store hands out retained op records newest first, below a cursor
(``Store.history``), with the oldest seq whose state it can still rebuild. A
page of every writer is one such read: there are more when the page is full
and does not reach that oldest seq.

A page of one writer (:class:`Writer`: a client id, an origin, or both) reads
the store a page at a time and keeps the matching records, until ``limit``
match or :data:`MAX_HISTORY_SCAN` records were looked at. Either way the
answer's cursor is the seq the scan got down to, so the next page goes on
from there and a writer with few ops in a long history is found page by page
instead of by one request that reads all of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from syncd.store.base import Record, Store

MAX_HISTORY_LIMIT: Final = 1000
"""Ops in one page of ``/history``: about what one answer of a few hundred KB holds."""

DEFAULT_HISTORY_LIMIT: Final = 100

MAX_HISTORY_SCAN: Final = 10_000
"""Retained records one filtered page (``?client_id=``, ``?origin=``) looks
at, at most: a writer with few ops in a long history would otherwise make one
request read all of it. A page that stops there has fewer ops than asked
and a ``next`` to go on from (a few ms of reading per page)."""


@dataclass(frozen=True, slots=True)
class Writer:
    """Whose ops: a client id, an origin, or both (both must match)."""

    client_id: int | None = None
    origin: str | None = None

    def matches(self, record: Record) -> bool:
        return (self.client_id is None or record["client_id"] == self.client_id) and (
            self.origin is None or record.get("origin") == self.origin
        )

    def body(self) -> dict[str, Any]:
        """As JSON fields (absent ones left out)."""
        out: dict[str, Any] = {}
        if self.client_id is not None:
            out["client_id"] = self.client_id
        if self.origin is not None:
            out["origin"] = self.origin
        return out


def history_item(record: Record) -> dict[str, Any]:
    """One op of a ``/history`` page: seq, writer, time, delta, and the
    op_id, origin and revert mark when it has them."""
    item = {
        "seq": record["seq"],
        "client_id": record["client_id"],
        "ts": record["ts"],
        "op": record["op"],
    }
    for key in ("op_id", "origin", "reverts"):
        value = record.get(key)
        if value is not None:
            item[key] = value
    return item


async def read_page(
    store: Store,
    ns: str,
    crdt_id: str,
    epoch: str,
    latest: int,
    before: int | None,
    limit: int,
    writer: Writer | None,
) -> tuple[list[Record], int, int | None]:
    """Retained records of life ``epoch`` (at seq ``latest``) below
    ``before``, newest first, at most ``limit``; with ``writer``, only that
    writer's. Also the oldest rebuildable seq and the next page's ``before``
    (None when no older records remain)."""
    if writer is None:
        records, oldest = await store.history(ns, crdt_id, epoch, latest, before, limit)
        last = records[-1]["seq"] if records else None
        more = len(records) == limit and last is not None and last > oldest + 1
        return records, oldest, last if more else None
    return await _read_filtered(store, ns, crdt_id, epoch, latest, before, limit, writer)


async def _read_filtered(
    store: Store,
    ns: str,
    crdt_id: str,
    epoch: str,
    latest: int,
    before: int | None,
    limit: int,
    writer: Writer,
) -> tuple[list[Record], int, int | None]:
    """:func:`read_page` for one writer: read a page at a time until
    ``limit`` match or :data:`MAX_HISTORY_SCAN` records were looked at."""
    found: list[Record] = []
    scanned = 0
    cursor = before
    oldest = 0
    while True:
        want = min(MAX_HISTORY_LIMIT, MAX_HISTORY_SCAN - scanned)
        records, oldest = await store.history(ns, crdt_id, epoch, latest, cursor, want)
        for record in records:
            scanned += 1
            cursor = record["seq"]
            if writer.matches(record):
                found.append(record)
                if len(found) == limit:
                    return found, oldest, cursor if cursor > oldest + 1 else None
        if len(records) < want or (cursor is not None and cursor <= oldest + 1):
            return found, oldest, None
        if scanned >= MAX_HISTORY_SCAN:
            # The bound: answer what was found, with where to go on from.
            return found, oldest, cursor
