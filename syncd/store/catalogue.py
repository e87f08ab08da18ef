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
"""

from __future__ import annotations

import bisect
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

    def __len__(self) -> int:
        return sum(len(space.types) for space in self._spaces.values())

    def add(self, ns: str, crdt_id: str, type_name: str, size: int = UNMEASURED) -> None:
        """A live CRDT (``size``: known from a hint; else kept or unmeasured)."""
        space = self._spaces.get(ns)
        if space is None:
            space = self._spaces[ns] = _Namespace()
        if crdt_id not in space.types:
            space.added.add(crdt_id)
            space.types[crdt_id] = type_name
            if crdt_id not in space.sizes:
                space.unmeasured += 1
        else:
            space.types[crdt_id] = type_name
        if size != UNMEASURED:
            self.note_size(ns, crdt_id, size)

    def remove(self, ns: str, crdt_id: str) -> None:
        space = self._spaces.get(ns)
        if space is None or space.types.pop(crdt_id, None) is None:
            return
        size = space.sizes.pop(crdt_id, None)
        if size is None:
            space.unmeasured -= 1
        else:
            space.bytes -= size
        if crdt_id in space.added:
            space.added.discard(crdt_id)
        else:
            space.stale += 1

    def note_size(self, ns: str, crdt_id: str, size: int) -> None:
        """The engine's size of a CRDT now."""
        space = self._spaces.get(ns)
        if space is None:
            space = self._spaces[ns] = _Namespace()
        held = space.sizes.get(crdt_id)
        if held is None:
            if crdt_id in space.types:
                space.unmeasured -= 1
            space.bytes += size
        else:
            space.bytes += size - held
        space.sizes[crdt_id] = size

    def unmeasure(self, ns: str, crdt_id: str) -> None:
        """Forget a CRDT's size (records of it were found after the hint)."""
        space = self._spaces.get(ns)
        if space is None:
            return
        size = space.sizes.pop(crdt_id, None)
        if size is not None:
            space.bytes -= size
            if crdt_id in space.types:
                space.unmeasured += 1

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


__all__ = ["MAX_SCAN", "UNMEASURED", "Catalogue", "Listed", "Usage"]
