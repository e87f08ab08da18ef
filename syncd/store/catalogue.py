"""Which CRDTs a local store holds, by namespace, for listing them in id order.

The engine holds only the CRDTs in use, so ``GET .../crdts`` pages through
the store's catalogue instead: every live CRDT's id and type, fed by the
records the store writes and reads back (an op names its CRDT and type, a
delete ends it).

Paging needs the ids sorted, while CRDTs are created one at a time and
listed rarely: a namespace keeps a sorted list and a set of ids added since;
a listing merges them (Timsort merges a sorted run and a sorted tail in
linear time) and skips ids deleted meanwhile, and the list is rebuilt once
the deleted ids it still carries pass half of it.

Sizes (for the quotas, syncd/quotas.py): each CRDT's size as the engine last
reported it (:meth:`Catalogue.note_size`), summed per namespace as it
changes. A CRDT whose size the store does not know (written before a crash,
after the last hint, and not used since) is *unmeasured*: counted, not
summed, until the engine reports it.

Metrics (syncd/metrics.py) read the sum over every namespace and the
namespaces with the most bytes at each scrape; summing or ranking a million
namespaces there took half a second of the event loop. So the catalogue also
keeps a :class:`UsageBoard`: running totals, added to where a usage changes
(a scrape reads them in O(1)), and the namespaces changed since the last
scrape, which the scrape ranks against a short list of those that may rank
among the largest.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

Listed = tuple[str, str]
"""A CRDT's id and type."""

MAX_SCAN: Final = 1000
"""Ids one :meth:`Catalogue.page` looks at, at most (a listing's largest page)."""


UNMEASURED: Final = -1
"""The size of a CRDT the engine has not reported since the store opened."""


@dataclass(frozen=True, slots=True)
class Usage:
    """A namespace's share of the store."""

    crdts: int = 0
    """Live CRDTs."""
    bytes: int = 0
    """The sum of their sizes (the unmeasured ones left out)."""
    unmeasured: int = 0
    """Live CRDTs whose size is not known yet (not in ``bytes``)."""


LARGEST_KEPT: Final = 1000
"""Namespaces a :class:`UsageBoard` can name as the largest by bytes: what
metrics show as series of their own (``MAX_NAMESPACE_SERIES`` in
syncd/metrics.py). The board keeps up to twice as many candidates, so that
trimming them (a sort of ``2 * LARGEST_KEPT``) happens once per
``LARGEST_KEPT`` namespaces that grow past the smallest kept."""

Counts = tuple[int, int, int]
"""A namespace's (crdts, bytes, unmeasured), as :class:`Usage` holds them."""

BytesOf = Callable[[str], "int | None"]
"""A namespace's bytes now, None when it holds no live CRDT (not counted)."""


class UsageBoard:
    """The sum of every namespace's usage, and the namespaces with the most
    bytes, so that reading them (a metrics scrape) does not walk every
    namespace.

    A namespace counts (in the totals and the ranking) while it holds a live
    CRDT, as ``usages()`` lists it.

    The totals (:attr:`namespaces`, :attr:`crdts`, :attr:`bytes`,
    :attr:`unmeasured`) are kept by the owner where a usage changes: a few
    integer adds, as it already knows the change. The ranking is lazy, as it
    is read once per scrape while usages change on every op that grows a
    CRDT: the owner adds a namespace whose bytes or liveness changed to
    :attr:`dirty` (one ``set.add``), and :meth:`largest` first re-ranks only
    those (:meth:`settle`). A scrape costs O(namespaces changed since the
    last one + ``keep``), the op path a set.add and a few adds.

    The ranking: ``_candidates`` maps up to ``2 * keep`` namespaces to their
    bytes (as of the last settle), and ``_floor`` bounds the bytes of every
    counted namespace outside it that is not dirty. A namespace settled past
    the floor joins; when the candidates pass ``2 * keep``, the ``keep``
    largest stay and the floor rises to the largest of those let go.
    :meth:`largest` ranks the candidates only; that is exact while ``k`` of
    them hold at least the floor. When the largest shrink below it (deletes,
    compaction), :attr:`stale` says so, and every namespace is ranked again
    (:meth:`rebuild`: one pass, rare).
    """

    __slots__ = (
        "_candidates",
        "_floor",
        "bytes",
        "crdts",
        "dirty",
        "keep",
        "namespaces",
        "unmeasured",
    )

    def __init__(self, keep: int = LARGEST_KEPT) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.keep = keep
        self.namespaces = 0
        """Namespaces that hold a live CRDT."""
        self.crdts = 0
        self.bytes = 0
        self.unmeasured = 0
        self.dirty: set[str] = set()
        """Namespaces whose bytes or liveness changed since the last settle."""
        self._candidates: dict[str, int] = {}
        self._floor = -1
        """At least the bytes of every counted namespace not a candidate
        (nor dirty)."""

    def load(self, usages: Iterable[tuple[str, Counts]]) -> None:
        """Start again from every namespace's usage (a store opening from a
        saved table of them): one pass."""
        self.namespaces = self.crdts = self.bytes = self.unmeasured = 0
        self.dirty = set()
        counted: list[tuple[str, int]] = []
        for ns, (crdts, size, unmeasured) in usages:
            if crdts > 0:
                self.namespaces += 1
                self.crdts += crdts
                self.bytes += size
                self.unmeasured += unmeasured
                counted.append((ns, size))
        self.rebuild(counted)

    def settle(self, bytes_of: BytesOf) -> None:
        """Rank the dirty namespaces against the candidates and the floor
        (their bytes from ``bytes_of``), and clear :attr:`dirty`."""
        candidates = self._candidates
        for ns in self.dirty:
            size = bytes_of(ns)
            if size is None:
                candidates.pop(ns, None)
            elif size > self._floor or ns in candidates:
                candidates[ns] = size
                if len(candidates) > 2 * self.keep:
                    self._trim()
                    candidates = self._candidates
        self.dirty.clear()

    def forget(self, ns: str) -> None:
        """``ns`` is no longer counted, nor will :meth:`settle` be asked about
        it (its owner dropped it, the totals less its figures already): out of
        the ranking and of :attr:`dirty`, as if it had never been counted. The
        floor stays: it still bounds the namespaces outside the candidates;
        one dropped from among the largest leaves fewer of them at least that
        high, and :attr:`stale` then has every namespace ranked again."""
        self.dirty.discard(ns)
        self._candidates.pop(ns, None)

    def _trim(self) -> None:
        """Keep the ``keep`` largest candidates; the floor covers the rest."""
        kept = heapq.nlargest(self.keep, self._candidates.items(), key=_second)
        names = {ns for ns, _ in kept}
        for ns, size in self._candidates.items():
            if ns not in names and size > self._floor:
                self._floor = size
        self._candidates = dict(kept)

    def largest(
        self, k: int, bytes_of: BytesOf, every: Callable[[], Iterable[tuple[str, int]]]
    ) -> list[str]:
        """The (at most ``k``, at most ``keep``) namespaces with the most
        bytes, largest first, ties in no set order: settles the dirty ones,
        and ranks ``every`` counted namespace's (name, bytes) again when the
        candidates fell :attr:`stale`."""
        self.settle(bytes_of)
        if self.stale:
            self.rebuild(every())
        ranked = heapq.nlargest(min(k, self.keep), self._candidates.items(), key=_second)
        return [ns for ns, _ in ranked]

    @property
    def stale(self) -> bool:
        """Whether a counted namespace outside the candidates may hold more
        bytes than one that :meth:`largest` names: fewer than ``keep`` of them
        (fewer than all, when fewer are counted) hold at least the floor.
        Meaningful once settled."""
        candidates = self._candidates
        if len(candidates) >= self.namespaces:
            return False  # every counted namespace is a candidate
        floor = self._floor
        return sum(1 for size in candidates.values() if size >= floor) < self.keep

    def rebuild(self, usages: Iterable[tuple[str, int]]) -> None:
        """Rank afresh from every counted namespace's (name, bytes)."""
        self._candidates = {}
        self._floor = -1
        self.dirty.clear()
        candidates = self._candidates
        for ns, size in usages:
            if size > self._floor:
                candidates[ns] = size
                if len(candidates) > 2 * self.keep:
                    self._trim()
                    candidates = self._candidates


def _second(item: tuple[str, int]) -> int:
    return item[1]


class _Namespace:
    __slots__ = ("added", "bytes", "sizes", "sorted", "stale", "types", "unmeasured")

    def __init__(self) -> None:
        self.types: dict[str, str] = {}
        self.sorted: list[str] = []
        self.added: set[str] = set()
        self.stale = 0
        """Ids in ``sorted`` that are no longer in ``types``."""
        self.sizes: dict[str, int] = {}
        """Measured sizes, also of ids whose first record is not indexed yet."""
        self.bytes = 0
        self.unmeasured = 0
        """Ids in ``types`` without a size."""

    def ordered(self) -> list[str]:
        if self.added:
            self.sorted.extend(sorted(self.added))
            self.sorted.sort()
            self.added.clear()
        if self.stale * 2 > len(self.sorted):
            self.sorted = [i for i in self.sorted if i in self.types]
            self.stale = 0
        return self.sorted


class Catalogue:
    """Every live CRDT of a store: namespace -> id -> type."""

    def __init__(self) -> None:
        self._spaces: dict[str, _Namespace] = {}
        self.board = UsageBoard()
        """Every namespace's usage summed, and the largest (for metrics)."""

    def __len__(self) -> int:
        return sum(len(space.types) for space in self._spaces.values())

    def add(self, ns: str, crdt_id: str, type_name: str, size: int = UNMEASURED) -> None:
        """A live CRDT (``size``: known from a hint; else kept or unmeasured)."""
        space = self._spaces.get(ns)
        if space is None:
            space = self._spaces[ns] = _Namespace()
        if crdt_id not in space.types:
            board = self.board
            if not space.types:
                # Counted from now on, with the sizes noted before its first id.
                board.namespaces += 1
                board.bytes += space.bytes
                board.dirty.add(ns)
            space.added.add(crdt_id)
            space.types[crdt_id] = type_name
            board.crdts += 1
            if crdt_id not in space.sizes:
                space.unmeasured += 1
                board.unmeasured += 1
        else:
            space.types[crdt_id] = type_name
        if size != UNMEASURED:
            self.note_size(ns, crdt_id, size)

    def remove(self, ns: str, crdt_id: str) -> None:
        space = self._spaces.get(ns)
        if space is None or crdt_id not in space.types:
            return
        board = self.board
        del space.types[crdt_id]
        board.crdts -= 1
        size = space.sizes.pop(crdt_id, None)
        if size is None:
            space.unmeasured -= 1
            board.unmeasured -= 1
        else:
            space.bytes -= size
            board.bytes -= size
        if crdt_id in space.added:
            space.added.discard(crdt_id)
        else:
            space.stale += 1
        if not space.types:
            # No longer counted: neither are the sizes of ids not indexed yet.
            board.namespaces -= 1
            board.bytes -= space.bytes
        board.dirty.add(ns)

    def note_size(self, ns: str, crdt_id: str, size: int) -> None:
        """The engine's size of a CRDT now."""
        space = self._spaces.get(ns)
        if space is None:
            space = self._spaces[ns] = _Namespace()
        held = space.sizes.get(crdt_id)
        grown = size if held is None else size - held
        space.bytes += grown
        space.sizes[crdt_id] = size
        if space.types:
            board = self.board
            board.bytes += grown
            board.dirty.add(ns)
            if held is None and crdt_id in space.types:
                space.unmeasured -= 1
                board.unmeasured -= 1

    def unmeasure(self, ns: str, crdt_id: str) -> None:
        """Forget a CRDT's size (records of it were found after the hint)."""
        space = self._spaces.get(ns)
        if space is None:
            return
        size = space.sizes.pop(crdt_id, None)
        if size is not None:
            space.bytes -= size
            if space.types:
                board = self.board
                board.bytes -= size
                board.dirty.add(ns)
                if crdt_id in space.types:
                    space.unmeasured += 1
                    board.unmeasured += 1

    def size_of(self, ns: str, crdt_id: str) -> int:
        space = self._spaces.get(ns)
        size = None if space is None else space.sizes.get(crdt_id)
        return UNMEASURED if size is None else size

    def usage(self, ns: str) -> Usage:
        space = self._spaces.get(ns)
        if space is None:
            return Usage()
        return Usage(len(space.types), space.bytes, space.unmeasured)

    def usages(self) -> dict[str, Usage]:
        """Every namespace that holds a CRDT."""
        return {ns: self.usage(ns) for ns, space in self._spaces.items() if space.types}

    def usage_total(self) -> tuple[int, Usage]:
        """How many namespaces hold a CRDT, and their usages summed: O(1)."""
        board = self.board
        return board.namespaces, Usage(board.crdts, board.bytes, board.unmeasured)

    def largest_usages(self, k: int) -> list[tuple[str, Usage]]:
        """The (at most ``k``, at most :data:`LARGEST_KEPT`) namespaces with
        the most bytes and their usages, largest first: ranks the namespaces
        changed since the last call against the board's few candidates, or
        every namespace once after the largest shrank
        (:attr:`UsageBoard.stale`)."""
        names = self.board.largest(k, self._counted_bytes, self._every_counted_bytes)
        return [(ns, self.usage(ns)) for ns in names]

    def _counted_bytes(self, ns: str) -> int | None:
        space = self._spaces.get(ns)
        return space.bytes if space is not None and space.types else None

    def _every_counted_bytes(self) -> Iterable[tuple[str, int]]:
        return ((ns, space.bytes) for ns, space in self._spaces.items() if space.types)

    def unmeasured(self, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` live CRDTs without a size."""
        out: list[tuple[str, str]] = []
        for ns, space in self._spaces.items():
            if not space.unmeasured:
                continue
            for crdt_id in space.types:
                if crdt_id not in space.sizes:
                    out.append((ns, crdt_id))
                    if len(out) == limit:
                        return out
        return out

    def type_of(self, ns: str, crdt_id: str) -> str | None:
        space = self._spaces.get(ns)
        return None if space is None else space.types.get(crdt_id)

    def page(self, ns: str, prefix: str, after: str | None, limit: int) -> list[Listed]:
        """Up to ``limit`` (at most :data:`MAX_SCAN`) ids and types, sorted, with
        ``prefix``, after ``after``."""
        space = self._spaces.get(ns)
        if space is None:
            return []
        ids = space.ordered()
        start = bisect.bisect_right(ids, after) if after is not None else 0
        if prefix:
            start = max(start, bisect.bisect_left(ids, prefix))
        out: list[Listed] = []
        types = space.types
        limit = min(limit, MAX_SCAN)
        previous = None
        for i in range(start, len(ids)):
            crdt_id = ids[i]
            if not crdt_id.startswith(prefix):
                break
            type_name = types.get(crdt_id)
            if type_name is None or crdt_id == previous:
                continue  # deleted, or deleted and created again (listed twice until a rebuild)
            previous = crdt_id
            out.append((crdt_id, type_name))
            if len(out) == limit:
                break
        return out


__all__ = [
    "LARGEST_KEPT",
    "MAX_SCAN",
    "UNMEASURED",
    "Catalogue",
    "Counts",
    "Listed",
    "Usage",
    "UsageBoard",
]
