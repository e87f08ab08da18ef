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

Those pages are read as a revert reads its window (``Store.history_window``,
:class:`~syncd.store.base.Retained`): the store knows each op's writer and
its origin's key without decoding it, so only the records that may be the
writer's are decoded (:meth:`Retained.may_be_by`; a tag of 0, which says
nothing, is decoded too). A window is read by seq, from a seq on, so the
page of the newest ``want`` records below a cursor is read as the ``want``
seqs below it; when fewer are there (the bottom of the history, or ops still
on their way to the disk at the top) and older records may be left, that
page is read as before (``Store.history``, every record decoded), so the
records looked at, and so the answer, are the same either way
(:class:`_Pages`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
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
    op_id, origin, and revert or restore mark when it has them."""
    item = {
        "seq": record["seq"],
        "client_id": record["client_id"],
        "ts": record["ts"],
        "op": record["op"],
    }
    for key in ("op_id", "origin", "reverts", "restores"):
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


@dataclass(slots=True)
class _Page:
    """Retained records below a seq, newest first: each one's seq, whether it
    may be the writer's (False: the store knows it is not), and its record,
    decoded when :attr:`record` is called for it."""

    seqs: list[int]
    maybe: list[bool]
    record: Callable[[int], Record]


class _Pages:
    """One filtered scan's reads of a CRDT life's history, a page at a time."""

    __slots__ = ("crdt_id", "epoch", "latest", "lowest", "ns", "store", "writer")

    def __init__(
        self, store: Store, ns: str, crdt_id: str, epoch: str, latest: int, writer: Writer
    ) -> None:
        self.store = store
        self.ns = ns
        self.crdt_id = crdt_id
        self.epoch = epoch
        self.latest = latest
        self.writer = writer
        self.lowest: int | None = None
        """The lowest retained seq, once asked for (``latest + 1`` when none is)."""

    async def below(self, before: int | None, want: int) -> tuple[_Page, int]:
        """What ``Store.history(.., before, want)`` gives (the newest ``want``
        retained records below ``before``, and the oldest rebuildable seq),
        read through ``Store.history_window`` so that only the records that
        may be the writer's are decoded."""
        store, ns, crdt_id, epoch, latest = (
            self.store,
            self.ns,
            self.crdt_id,
            self.epoch,
            self.latest,
        )
        # Retained ops are at the CRDT's seq at most: below latest + 1 is all of them.
        top = latest + 1 if before is None else min(before, latest + 1)
        since = max(0, top - want)
        held, oldest = await store.history_window(ns, crdt_id, epoch, latest, since, top - since)
        # Every retained seq in [since, top) is in it: there are top - since at most.
        n = bisect.bisect_left(held.seqs, top)
        if n < want and since > 0 and await self._lowest() < since:
            # Fewer than asked, and older records are left: the page reaches
            # past the seqs read. Read it as Store.history gives it (decoded).
            records, oldest = await store.history(ns, crdt_id, epoch, latest, before, want)
            every = [True] * len(records)
            return _Page([r["seq"] for r in records], every, records.__getitem__), oldest
        maybe = [False] * n
        for i in held.may_be_by(self.writer.client_id, self.writer.origin):
            if i < n:
                maybe[i] = True
        last = n - 1
        seqs = held.seqs
        return _Page(
            [seqs[last - j] for j in range(n)], maybe[::-1], lambda j: held.record(last - j)
        ), oldest

    async def _lowest(self) -> int:
        """The lowest retained seq (``latest + 1`` when none is), read once per scan."""
        if self.lowest is None:
            first, _ = await self.store.history_window(
                self.ns, self.crdt_id, self.epoch, self.latest, 0, 1
            )
            self.lowest = first.seqs[0] if len(first) else self.latest + 1
        return self.lowest


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
    ``limit`` match or :data:`MAX_HISTORY_SCAN` records were looked at;
    decode only the records that may match (:class:`_Pages`)."""
    found: list[Record] = []
    scanned = 0
    cursor = before
    oldest = 0
    pages = _Pages(store, ns, crdt_id, epoch, latest, writer)
    while True:
        want = min(MAX_HISTORY_LIMIT, MAX_HISTORY_SCAN - scanned)
        page, oldest = await pages.below(cursor, want)
        seqs, maybe = page.seqs, page.maybe
        for j, seq in enumerate(seqs):
            scanned += 1
            cursor = seq
            if maybe[j] and writer.matches(record := page.record(j)):
                found.append(record)
                if len(found) == limit:
                    return found, oldest, cursor if cursor > oldest + 1 else None
        if len(seqs) < want or (cursor is not None and cursor <= oldest + 1):
            return found, oldest, None
        if scanned >= MAX_HISTORY_SCAN:
            # The bound: answer what was found, with where to go on from.
            return found, oldest, cursor
