"""Taking back one writer's ops on an rga (docs/revert.md#rga).

Theory of operation
-------------------
A revert is handed the *window*: every op of the sequence's life from some
seq up to now, as deltas, each marked when it is to be taken back. The
elements those ops touched are all named in the deltas (an insert names its
first id and length, a delete its id ranges), so the work goes by id, never
by walking the whole sequence:

- **Inserted by a marked op and still visible**: deleted (one ``delete`` by
  ids, handed over as runs: :class:`~syncd.crdt.rga.ids.IdRuns`). What
  another writer typed between those elements stays.
- **Deleted by a marked op, by no unmarked one, and not inserted by a marked
  one**: brought back if it would be visible had the marked ops not been
  made, that is when an unmarked op of the window inserted it, or it was
  visible in the *base* (the state right before the window). A deleted
  element keeps no content, so its value comes from that insert's delta or
  from the base, whose checkpoint runs and deltas are scanned for just those
  elements (:func:`base_values`).

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

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from syncd.crdt.base import Base, Step
from syncd.crdt.rga.ids import IdRuns, format_id
from syncd.crdt.rga.sequence import Origin, RunSeq
from syncd.crdt.window import Window, text_key

Element = tuple[int, int]
"""``(client, counter)``."""
Value = tuple[Any, bool]
"""An element's value, and whether it was a character of text."""
Piece = tuple[int, int, int, Origin]
"""``(client, first counter, count, the element before the first)``: a stretch
of consecutive elements in document order (:meth:`RunSeq.pieces`)."""


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

    def normal(self) -> dict[int, list[tuple[int, int]]]:
        """Per client, the sorted, disjoint ``(start, end)`` intervals."""
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
        theirs = other.normal()
        for client, spans in self.normal().items():
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
        for client, spans in sorted(self.normal().items()):
            for start, end in spans:
                yield client, start, end - start

    def __bool__(self) -> bool:
        return any(self.normal().values())


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


def _overlaps(spans: list[tuple[int, int]], lo: int, hi: int) -> Iterator[tuple[int, int]]:
    """The parts of ``[lo, hi)`` inside the sorted, disjoint ``spans``."""
    at = bisect_right(spans, (lo, hi)) - 1
    if at < 0:
        at = 0
    while at < len(spans):
        start, end = spans[at]
        if start >= hi:
            return
        if end > lo:
            yield max(start, lo), min(end, hi)
        at += 1


def base_values(base: Base, wanted: Spans) -> dict[Element, Value]:
    """The values the ``wanted`` elements had in ``base``, for those visible
    there: read off the checkpoint's runs and the deltas after it, without
    building the sequence (a document of 100,000 elements takes tens of ms to
    build; the few elements a revert brings back take a scan of its runs)."""
    index = wanted.normal()
    # Per client, the wanted spans' starts and ends apart: a run is passed
    # over after one bisect when no span reaches into it (nearly every run).
    starts = {client: [lo for lo, _ in spans] for client, spans in index.items()}
    ends = {client: [hi for _, hi in spans] for client, spans in index.items()}
    out: dict[Element, Value] = {}

    def take(client: int, counter: int, content: Any) -> None:
        """The wanted elements' values in ``content``, the run of ``client``
        from ``counter`` (when a wanted span reaches into it: nearly every
        run and insert is passed over after one bisect)."""
        end = counter + len(content)
        los = starts.get(client)
        if los is None:
            return
        # The last span starting before the run's end reaches into it, or none does.
        at = bisect_left(los, end) - 1
        if at < 0 or ends[client][at] <= counter:
            return
        text = type(content) is str
        for lo, hi in _overlaps(index[client], counter, end):
            for c in range(lo, hi):
                out[(client, c)] = (content[c - counter], text)

    state = base.state
    if state is not None:
        for client, counter, _, content in state["runs"]:
            if type(content) is int:  # a count: deleted elements
                continue
            los = starts.get(client)
            # take()'s test, here: a call for each of ten thousand runs costs more.
            if los is not None:
                at = bisect_left(los, counter + len(content)) - 1
                if at >= 0 and ends[client][at] > counter:
                    take(client, counter, content)
    for delta in base.deltas:
        if delta["op"] == "insert":
            take(delta["client"], delta["counter"], _content(delta))
        else:
            for client, first, count in delta["ranges"]:
                spans = index.get(client)
                if spans:
                    for lo, hi in _overlaps(spans, first, first + count):
                        for c in range(lo, hi):
                            out.pop((client, c), None)
    return out


def revert_ops(now: RunSeq, steps: Sequence[Step], base: Base) -> list[dict[str, Any]]:
    """The ops that take back the marked ops of the window ``steps`` on
    ``now`` (see the module docstring)."""
    window = Window.of(steps)
    marked, kinds = window.marked, window.kinds
    marked_ins, marked_del, other_del = Spans(), Spans(), Spans()
    delete = text_key("delete")
    # The marked ops, and the unmarked ones that may be deletes, are decoded;
    # the others' inserts (most of a window) only if a value is looked up.
    read = [i for i, kind in enumerate(kinds) if marked[i] or kind == delete or not kind]
    unmarked_inserts: list[int] = []
    """Unmarked ops that may have been deletes and are inserts."""
    delta: Mapping[str, Any]
    for i in read:
        delta = window.delta(i)
        if delta["op"] == "insert":
            if marked[i]:
                marked_ins.add(delta["client"], delta["counter"], len(_content(delta)))
            else:
                unmarked_inserts.append(i)
            continue
        spans = marked_del if marked[i] else other_del
        for client, first, count in delta["ranges"]:
            spans.add(client, first, count)
    restore = marked_del.minus(other_del).minus(marked_ins)
    pieces: list[Piece] = []
    present = Spans()
    for client, first, count in restore.spans():
        for start, k, _, prev in now.pieces(client, first, count) or ():
            pieces.append((client, start, k, prev))
            present.add(client, start, k)
    values = base_values(base, present)
    if len(values) < sum(k for _, _, k, _ in pieces):
        missing = Spans()
        for client, start, k, _ in pieces:
            for counter in range(start, start + k):
                if (client, counter) not in values:
                    missing.add(client, counter, 1)
        # The unmarked ops that may be inserts, in seq order, undecoded.
        inserts = [i for i, kind in enumerate(kinds) if kind and kind != delete and not marked[i]]
        if unmarked_inserts:
            inserts = sorted(inserts + unmarked_inserts)
        values.update(window_values(window, inserts, missing))
    ops = _inserts(values, pieces)
    visible = [
        (client, start, k)
        for client, first, count in marked_ins.spans()
        for start, k, content, _ in now.pieces(client, first, count) or ()
        if content is not None
    ]
    if visible:
        ops.append({"op": "delete", "ids": IdRuns(visible)})
    return ops


def window_values(window: Window, inserts: list[int], wanted: Spans) -> dict[Element, Value]:
    """The values of the ``wanted`` elements that the unmarked ``inserts`` of
    the window made (ops by index, seq order, not all decoded).

    An insert's first counter is greater than every counter in the sequence
    it met (a Lamport clock, :attr:`RunSeq.clock`), so the window's inserts
    come with growing counters, and the one that may have made an element is
    found by bisecting them on their first counter: a few decoded per run of
    wanted elements, not every insert of the window. A run the bisection
    does not place (inserts out of counter order, or an op that is not an
    insert after all) is looked up in every insert instead, decoded."""
    out: dict[Element, Value] = {}
    firsts: dict[int, int | None] = {}

    def first(j: int) -> int | None:
        """Insert ``j``'s first counter (None: not an insert)."""
        if j not in firsts:
            delta = window.delta(inserts[j])
            firsts[j] = delta["counter"] if delta["op"] == "insert" else None
        return firsts[j]

    unplaced = Spans()
    for client, lo, n in wanted.spans():
        counter, end = lo, lo + n
        while counter < end:
            found = _bisect(first, len(inserts), counter)
            delta = None if found is None else window.delta(inserts[found])
            if delta is None or delta["client"] != client:
                unplaced.add(client, counter, end - counter)
                break
            content = _content(delta)
            start = delta["counter"]
            stop = min(end, start + len(content))
            if stop <= counter:
                # Not made by an insert of the window, if the counters grow.
                unplaced.add(client, counter, end - counter)
                break
            text = type(content) is str
            for c in range(counter, stop):
                out[(client, c)] = (content[c - start], text)
            counter = stop
    if unplaced:
        contents = Contents()
        for i in inserts:
            delta = window.delta(i)
            if delta["op"] == "insert":
                contents.add(delta["client"], delta["counter"], _content(delta))
        for client, lo, n in unplaced.spans():
            for c in range(lo, lo + n):
                value = contents.get(client, c)
                if value is not None:
                    out[(client, c)] = value
    return out


def _bisect(first: Callable[[int], int | None], n: int, counter: int) -> int | None:
    """The last of ``n`` inserts whose first counter is at most ``counter``
    (None: none is, or a probe was not an insert)."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        at = first(mid)
        if at is None:
            return None
        if at <= counter:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1 if lo else None


def _inserts(values: dict[Element, Value], pieces: list[Piece]) -> list[dict[str, Any]]:
    """One insert per chain of consecutive elements to bring back (those with
    a value), after the element before its first; chains in the order of
    their first elements' ids.

    ``pieces`` are the elements looked up, as :meth:`RunSeq.pieces` gives
    them: each a stretch of consecutive elements in document order and the
    element before its first. A chain is made of *segments*, stretches of a
    piece whose elements all have a value: one that reaches its piece's end
    goes on with the segment that starts a piece right after its last
    element, if there is one."""
    segments: list[tuple[int, int, int, Origin]] = []
    """``(client, first, end, before)``, before: the element before ``first``."""
    starting_after: dict[Element, int] = {}
    """The segment (by index) that starts a piece, by the element before it."""
    reaches_end: list[bool] = []
    for client, start, k, prev in pieces:
        end = start + k
        counter = start
        while counter < end:
            if (client, counter) not in values:
                counter += 1
                continue
            first = counter
            while counter < end and (client, counter) in values:
                counter += 1
            if first == start and prev is not None:
                starting_after[prev] = len(segments)
            segments.append(
                (client, first, counter, prev if first == start else (client, first - 1))
            )
            reaches_end.append(counter == end)
    ops: list[dict[str, Any]] = []
    heads = sorted(
        (client, first, i)
        for i, (client, first, _, prev) in enumerate(segments)
        if prev is None or prev not in values
    )
    for _, _, i in heads:
        chain: list[Value] = []
        at: int | None = i
        while at is not None:
            client, first, end, _ = segments[at]
            chain += [values[(client, counter)] for counter in range(first, end)]
            at = starting_after.get((client, end - 1)) if reaches_end[at] else None
        prev = segments[i][3]
        after = None if prev is None else format_id(*prev)
        if all(text for _, text in chain):
            ops.append({"op": "insert", "after": after, "text": "".join(v for v, _ in chain)})
        else:
            ops.append({"op": "insert", "after": after, "values": [v for v, _ in chain]})
    return ops
