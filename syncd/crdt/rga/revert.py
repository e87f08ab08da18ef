"""Taking back one writer's ops on an rga (docs/revert.md#rga).

Theory of operation
-------------------
A revert is handed the *window*: every op of the sequence's life from some
seq up to now, as deltas, each marked when it is to be taken back. The
elements those ops touched are all named in the deltas (an insert names its
first id and length, a delete its id ranges), so the work goes by id, never
by walking the whole sequence:

- **Inserted by a marked op and still visible**: deleted (one ``delete`` by
  ids). What another writer typed between those elements stays.
- **Deleted by a marked op, by no unmarked one, and not inserted by a marked
  one**: brought back if it would be visible had the marked ops not been
  made, that is when an unmarked op of the window inserted it, or it was
  visible in the *base* (the state right before the window). A deleted
  element keeps no content, so its value comes from that insert's delta or
  from the base; only then is the base needed (the caller reads it on
  demand: :func:`revert_ops` returns None to ask for it).

A deleted element cannot come back under its id, so it comes back as a new
one with the same value at the same place: right after the element before it
in document order, deleted or not. A new element goes right after the one it
names, before everything else there (it has the greatest counter), so a run
of consecutive elements to bring back is one ``insert`` after the element
before the first of them, and the visible order is as it was.

An element another writer inserted right after a marked one keeps its place:
the marked element stays in the sequence as a tombstone. Ids are stable, so
the ops apply as they are to a sequence that has gone on since (they merge
with what came after like any concurrent edit).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from syncd.crdt.base import Step
from syncd.crdt.rga.ids import format_id
from syncd.crdt.rga.sequence import Origin, RunSeq

Element = tuple[int, int]
"""``(client, counter)``."""
Value = tuple[Any, bool]
"""An element's value, and whether it was a character of text."""


class Spans:
    """Sets of element ids as sorted, disjoint ``[start, end)`` counter
    intervals per client: a deletion of ten thousand characters is one."""

    __slots__ = ("_by_client", "_sorted")

    def __init__(self) -> None:
        self._by_client: dict[int, list[tuple[int, int]]] = {}
        self._sorted = True

    def add(self, client: int, start: int, n: int) -> None:
        self._by_client.setdefault(client, []).append((start, start + n))
        self._sorted = False

    def _normal(self) -> dict[int, list[tuple[int, int]]]:
        if not self._sorted:
            for client, spans in self._by_client.items():
                spans.sort()
                merged: list[tuple[int, int]] = []
                for start, end in spans:
                    if merged and start <= merged[-1][1]:
                        if end > merged[-1][1]:
                            merged[-1] = (merged[-1][0], end)
                    else:
                        merged.append((start, end))
                self._by_client[client] = merged
            self._sorted = True
        return self._by_client

    def minus(self, other: Spans) -> Spans:
        """The elements here and not in ``other``."""
        out = Spans()
        theirs = other._normal()
        for client, spans in self._normal().items():
            cut = theirs.get(client, [])
            kept: list[tuple[int, int]] = []
            i = 0
            for start, end in spans:
                while i < len(cut) and cut[i][1] <= start:
                    i += 1
                j = i
                while start < end and j < len(cut) and cut[j][0] < end:
                    if cut[j][0] > start:
                        kept.append((start, cut[j][0]))
                    start = max(start, cut[j][1])
                    j += 1
                if start < end:
                    kept.append((start, end))
            if kept:
                out._by_client[client] = kept
        return out

    def spans(self) -> Iterator[tuple[int, int, int]]:
        """``(client, first, count)`` of each interval, by client and counter."""
        for client, spans in sorted(self._normal().items()):
            for start, end in spans:
                yield client, start, end - start

    def __bool__(self) -> bool:
        return any(self._normal().values())


class Contents:
    """The values of the elements the window's unmarked inserts made."""

    __slots__ = ("_by_client",)

    def __init__(self) -> None:
        self._by_client: dict[int, tuple[list[int], list[tuple[int, Any]]]] = {}

    def add(self, client: int, first: int, content: Any) -> None:
        starts, items = self._by_client.setdefault(client, ([], []))
        # Inserts of one client come with growing counters: appends keep the order.
        if starts and first < starts[-1]:
            at = bisect_right(starts, first)
            starts.insert(at, first)
            items.insert(at, (first, content))
        else:
            starts.append(first)
            items.append((first, content))

    def get(self, client: int, counter: int) -> Value | None:
        found = self._by_client.get(client)
        if found is None:
            return None
        starts, items = found
        at = bisect_right(starts, counter) - 1
        if at < 0:
            return None
        first, content = items[at]
        off = counter - first
        if off >= len(content):
            return None
        return content[off], type(content) is str


def _content(delta: Mapping[str, Any]) -> Any:
    text = delta.get("text")
    return text if text is not None else delta["values"]


def revert_ops(
    now: RunSeq, window: Sequence[Step], base: RunSeq | None
) -> list[dict[str, Any]] | None:
    """The ops that take back the marked ops of ``window`` on ``now`` (see
    the module docstring); None when the base is needed and not given."""
    marked_ins, other_ins, marked_del, other_del = Spans(), Spans(), Spans(), Spans()
    contents = Contents()
    for delta, marked in window:
        if delta["op"] == "insert":
            content = _content(delta)
            client, first = delta["client"], delta["counter"]
            if marked:
                marked_ins.add(client, first, len(content))
            else:
                other_ins.add(client, first, len(content))
                contents.add(client, first, content)
        else:
            spans = marked_del if marked else other_del
            for client, first, count in delta["ranges"]:
                spans.add(client, first, count)
    restore = marked_del.minus(other_del).minus(marked_ins)
    from_base = restore.minus(other_ins)
    if from_base and base is None:
        return None
    base_values: dict[Element, Value] = {}
    if base is not None:
        for client, first, count in from_base.spans():
            for start, k, content, _ in base.pieces(client, first, count) or ():
                if content is not None:
                    text = type(content) is str
                    for i in range(k):
                        base_values[(client, start + i)] = (content[i], text)
    values: dict[Element, Value] = {}
    before: dict[Element, Origin] = {}
    for client, first, count in restore.spans():
        for start, k, _, prev in now.pieces(client, first, count) or ():
            for i in range(k):
                element = (client, start + i)
                value = contents.get(client, start + i) or base_values.get(element)
                if value is not None:
                    values[element] = value
                    before[element] = prev if i == 0 else (client, start + i - 1)
    ops = _inserts(values, before)
    ids = [
        format_id(client, start + i)
        for client, first, count in marked_ins.spans()
        for start, k, content, _ in now.pieces(client, first, count) or ()
        if content is not None
        for i in range(k)
    ]
    if ids:
        ops.append({"op": "delete", "ids": ids})
    return ops


def _inserts(values: dict[Element, Value], before: dict[Element, Origin]) -> list[dict[str, Any]]:
    """One insert per chain of consecutive elements to bring back, after the
    element before its first."""
    following = {prev: element for element, prev in before.items() if prev is not None}
    ops: list[dict[str, Any]] = []
    for head in sorted(values):
        prev = before[head]
        if prev is not None and prev in values:
            continue  # not the first of its chain
        chain: list[Value] = []
        element: Element | None = head
        while element is not None and element in values:
            chain.append(values[element])
            element = following.get(element)
        after = None if prev is None else format_id(*prev)
        if all(text for _, text in chain):
            ops.append({"op": "insert", "after": after, "text": "".join(v for v, _ in chain)})
        else:
            ops.append({"op": "insert", "after": after, "values": [v for v, _ in chain]})
    return ops
