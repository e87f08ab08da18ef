"""The element sequence of the rga type: blocks of runs, with an id index.

This module is the only one that touches the structure. Every routine that
changes it is a method of :class:`RunSeq` here, the editing fast paths
included (a keystroke at the cursor, backspace), and each public method
leaves the structure whole, caches included, for the next; the type in
:mod:`syncd.crdt.rga.type` validates ops, makes deltas and converts state
through those public methods alone (tests/crdt/test_rga_boundary.py checks
that nothing else reaches in). The typing buffer (``_pend``, below) is the
one cache that lags behind the structure; every public method but
:meth:`RunSeq.type_text` first moves it into the run, so that no caller has
to remember to.

Theory of operation
-------------------
The sequence is every element ever inserted, deleted ones included (a tombstone
must stay: a concurrent insert may name it as its ``after``). Storing one
object per element would cost about 200 bytes per character, so elements are
grouped into *runs*: consecutive counters of one client where every element
after the first was inserted right after its predecessor (typing produces
exactly that). A run is either wholly visible or wholly deleted; deleting part
of a run splits it, and a run can be split anywhere because the second part's
``after`` (its *origin*) is implied: the last element of the first part.

Runs live in *blocks* (lists of at most ``BLOCK_MAX`` runs) with a parallel
list of per-block visible lengths, so turning a visible index into a position
walks blocks, not elements. A *finger* (the last block visited and its visible
start) makes the walk short for local edits, which real editing is made of.

The id index maps each client to its runs sorted by first counter (two
parallel lists for ``bisect``), so an element id finds its run in O(log n).
Runs point to their block, and blocks carry their position in the block list,
renumbered lazily after block splits.

Order is classic RGA: a new element goes right after its origin, past every
following element with a greater id ``(counter, client)``. Counters are Lamport
clocks (a new counter is the greatest seen plus one), so an element always has
a greater counter than its origin: the elements right after the origin that
are greater than the new one are exactly the later siblings and their
descendants, and the first smaller one ends the scan. A run's ids increase
along the run, so the scan compares only the first element of each run it
passes. A local insert has the greatest counter of all and needs no scan.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, compress, groupby, pairwise, repeat
from operator import add, and_, attrgetter, eq, ge, itemgetter, ne, not_
from typing import Any

from syncd.crdt.rga.ids import format_id

RUN_MAX = 512
"""Visible elements per run: typing extends a run only up to this many, and a
longer insert (or a stored run) is cut into runs of this many, because
extending a text run copies its string and splitting a run copies what
follows the cut: it bounds both copies."""

INDEX_CHUNK = 256
"""Runs per chunk of a client's id index (:class:`ClientRuns`), up to twice
this before a chunk splits: what a run coming or going moves there."""

BLOCK_MAX = 32
"""Runs per block before the block splits in two. Small blocks make the scan
inside a block short; large ones make walking across blocks short. Anything
from 24 to 64 did about equally well on the editing traces (perf/studies/rga_trace.py)."""

BULK_RANGES = 32
"""Ranges from which :meth:`RunSeq.delete_ranges` may take one pass over the
blocks (:meth:`RunSeq._delete_bulk`) instead of going range by range. The
pass has a fixed cost (about 5-10 us here) that a few ranges do not earn
back: 8 ranges of one run each, side by side, took 10 us range by range
and 13-15 us in one pass; 16 about the same both ways; 32 and 64, 36 and 70
us against 34 and 48 (perf.studies.rga_delete has the large cases)."""

BULK_DENSITY = 6
"""... and only when they are at least this many per block of the document:
the pass goes over every run of a block it touches, deleted ones included,
and lays out the runs of a writer with many ranges flat, so that where the
ranges are thin among the runs it costs more than going range by range
does. A select-all of seph-blog1 x2 (6,802 ranges, 3.7 a block, 37,027
runs, half of them deleted) took 0.022 s either way; of 96,000 runs by two
writers in turn (16 a block), 0.12 s range by range and 0.075-0.083 s in
one pass; of 192,000 runs every other one deleted (8 a block), 0.24 and
0.20-0.23 s."""

BULK_IDS = 1024
"""It takes the pass however few the ranges when they hold this many ids
each on average: a range then covers many runs, up to a run per id (one
writer typing backwards: one range of 96,000 runs took 0.108 s range by
range, 0.035-0.043 s in one pass; the pass paid from about 6 runs in a
range). Runs are at most ``RUN_MAX`` (512) long, so 1,024 ids are at least
2 runs; a range over runs that long cost 6 us more in one pass at 4,096
ids, and paid from about 16,384 (a single writer's linear text)."""

SPARSE_BLOCK = 4
"""The pass goes over a whole block when at least 1/``SPARSE_BLOCK`` of its
runs change; over fewer, it finds them in the block (``list.index``, at C
speed) and passes only over each and a neighbour each side. Not tuned: a
select-all makes every block it touches dense, and a few scattered ranges
do not take the pass at all."""

FLAT_SHARE = 2
"""The pass finds the runs of a writer's ranges all at once (maps over a
flat copy of the writer's runs: :func:`_mark_many`) when the ranges are at
least 1/``FLAT_SHARE`` of the writer's runs; fewer, one range at a time.
The copy costs about 0.35 us per run here, a range found alone about
1 us: for seph-blog1 x2 (6,802 ranges, 37,027 runs) the copy made finding
them 0.021 s against 0.009 s; for 48,000 ranges of as many runs,
0.052-0.065 s against 0.081 s."""

INDEX_REBUILD = 8
"""The pass builds a writer's id index entry again, rather than changing it
run by run, when the runs it split off and joined away are more than
1/``INDEX_REBUILD`` of the writer's runs (a select-all of a text every
other element of which was deleted joins every deleted run: 96,000 joins
in an entry of 192,000). Not tuned further: both cost about a list move
per run."""

MAX_COUNTER = 2**53 - 1
"""Counters travel as JSON numbers in deltas; every client (JavaScript included)
holds integers up to 2^53 - 1 exactly."""

Origin = tuple[int, int] | None
"""An element id ``(client, counter)``, or None for the head of the sequence."""

Range = tuple[int, int, int] | list[int]
"""Elements ``counter .. counter + count - 1`` of ``client``: ``(client, counter, count)``."""

Piece = tuple[int, int, Any, Origin]
"""Elements of one client within one run (:meth:`RunSeq.pieces`): first counter,
count, content (None when deleted), and the element right before them."""


class Run:
    """Elements ``counter .. counter + n - 1`` of ``client``, all visible or all deleted."""

    __slots__ = ("blk", "client", "content", "counter", "n", "origin", "vis")

    def __init__(
        self, client: int, counter: int, n: int, vis: int, content: Any, origin: Origin, blk: Block
    ) -> None:
        self.client = client
        self.counter = counter
        self.n = n
        self.vis = vis
        """``n`` while visible, 0 once deleted."""
        self.content = content
        """A str (text: one element per character), a list (values), None when deleted."""
        self.origin = origin
        """The first element's origin; each later element's origin is its predecessor."""
        self.blk = blk


class ClientRuns:
    """One client's runs sorted by first counter, for :meth:`RunSeq._lookup`.

    Kept in chunks of at most ``2 * INDEX_CHUNK`` runs (each a list of first
    counters and a list of runs) with the first counter of each chunk, so
    that a run coming or going (every split, every join of deleted runs)
    moves at most a chunk's entries: in one flat list it moved every later
    one, and one delete of tens of thousands of ids took seconds per op."""

    __slots__ = ("firsts", "keys", "runs")

    def __init__(self, runs: list[Run]) -> None:
        """``runs``: at least one, sorted by first counter."""
        step = INDEX_CHUNK
        self.runs = [runs[i : i + step] for i in range(0, len(runs), step)]
        self.keys = [[run.counter for run in chunk] for chunk in self.runs]
        self.firsts = [keys[0] for keys in self.keys]

    def find(self, counter: int) -> Run | None:
        """The run with the greatest first counter at most ``counter``."""
        keys = self.keys[-1]
        if counter >= keys[-1]:
            # The client's newest run: what fresh deltas name.
            return self.runs[-1][-1]
        ci = bisect_right(self.firsts, counter) - 1
        if ci < 0:
            return None
        keys = self.keys[ci]
        return self.runs[ci][bisect_right(keys, counter) - 1]

    def span(self, counter: int, end: int) -> list[Run]:
        """The runs holding elements ``counter .. end - 1`` (``counter`` exists),
        in counter order: slices of the chunks, taken at C speed."""
        firsts = self.firsts
        ci = bisect_right(firsts, counter) - 1
        keys = self.keys[ci]
        pos = bisect_right(keys, counter) - 1
        stop = bisect_left(keys, end, pos)
        out = self.runs[ci][pos:stop]
        last = len(firsts) - 1
        while stop == len(keys) and ci < last and firsts[ci + 1] < end:
            ci += 1
            keys = self.keys[ci]
            stop = bisect_left(keys, end)
            out += self.runs[ci][:stop]
        return out

    def next_key(self, counter: int) -> int | None:
        """The smallest first counter at least ``counter`` (None: none is)."""
        firsts = self.firsts
        ci = bisect_right(firsts, counter) - 1
        if ci < 0:
            return firsts[0]
        keys = self.keys[ci]
        pos = bisect_left(keys, counter)
        if pos < len(keys):
            return keys[pos]
        return firsts[ci + 1] if ci + 1 < len(firsts) else None

    def add(self, run: Run) -> None:
        counter = run.counter
        keys = self.keys[-1]
        if keys[-1] < counter:
            keys.append(counter)
            self.runs[-1].append(run)
            ci = len(self.keys) - 1
        else:
            ci = bisect_right(self.firsts, counter) - 1
            if ci < 0:
                ci = 0
            keys = self.keys[ci]
            pos = bisect_right(keys, counter)
            keys.insert(pos, counter)
            self.runs[ci].insert(pos, run)
            if pos == 0:
                self.firsts[ci] = counter
        if len(keys) > 2 * INDEX_CHUNK:
            runs = self.runs[ci]
            self.keys.insert(ci + 1, keys[INDEX_CHUNK:])
            self.runs.insert(ci + 1, runs[INDEX_CHUNK:])
            self.firsts.insert(ci + 1, keys[INDEX_CHUNK])
            del keys[INDEX_CHUNK:]
            del runs[INDEX_CHUNK:]

    def remove(self, run: Run) -> bool:
        """Take ``run`` out; False when no run of the client is left."""
        counter = run.counter
        ci = bisect_right(self.firsts, counter) - 1
        keys = self.keys[ci]
        pos = bisect_left(keys, counter)
        del keys[pos]
        del self.runs[ci][pos]
        if not keys:
            del self.keys[ci]
            del self.runs[ci]
            del self.firsts[ci]
            return bool(self.keys)
        if pos == 0:
            self.firsts[ci] = keys[0]
        return True

    def rekey(self, run: Run, counter: int) -> None:
        """``run`` now starts at ``counter``, lower, with no run of the client
        starting in between."""
        ci = bisect_right(self.firsts, run.counter) - 1
        keys = self.keys[ci]
        pos = bisect_left(keys, run.counter)
        keys[pos] = counter
        if pos == 0:
            self.firsts[ci] = counter

    def __iter__(self) -> Iterator[Run]:
        for chunk in self.runs:
            yield from chunk


class Block:
    __slots__ = ("idx", "runs")

    def __init__(self, runs: list[Run], idx: int) -> None:
        self.runs = runs
        self.idx = idx
        """Position in the block list; stale when ``>= RunSeq._dirty``."""


class RunSeq:
    """The sequence structure; :class:`syncd.crdt.rga.Rga` adds ops, deltas and state.

    Public methods check nothing the type has already checked (an op's
    shape, that an id exists) and report what they cannot do with None; they
    raise ValueError only for what a delta or a state can get wrong.
    """

    __slots__ = (
        "_blocks",
        "_bvis",
        "_dirty",
        "_fbi",
        "_fstart",
        "_hot",
        "_hot_bi",
        "_hot_client",
        "_hot_end",
        "_hot_ri",
        "_hot_shift",
        "_hot_stop",
        "_ids",
        "_last",
        "_len",
        "_max",
        "_pend",
    )

    def __init__(self) -> None:
        first = Block([], 0)
        self._blocks: list[Block] = [first]
        self._bvis: list[int] = [0]
        """Visible elements per block."""
        self._dirty = 1
        """Blocks from this position on may hold a stale ``idx``."""
        self._len = 0
        """Visible elements in all."""
        self._max = 0
        """The greatest counter seen (the Lamport clock)."""
        self._ids: dict[int, ClientRuns] | None = None
        """client -> its runs sorted by first counter. Built on the
        first lookup by id and kept up to date from then on; a document edited
        only by index (the common case) never pays for it."""
        self._fbi = 0
        self._fstart: int | None = 0
        """The finger: a block and the visible index where it starts (None:
        not known yet, summed up on the next seek)."""
        self._last: tuple[Run, int, int] | None = None
        """The run the last integrated delta went to, with its block and position then."""
        self._hot: Run | None = None
        self._hot_end: int | None = None
        self._hot_bi = 0
        self._hot_ri = 0
        self._hot_stop = -1
        self._hot_shift = 0
        self._hot_client = 0
        self._pend: list[str] = []
        """The *hot* run: a visible run at the cursor of the last local index op
        (block, position in it, and the visible index right after it; both
        ``_hot`` and ``_hot_end`` None when unknown). The next keystroke usually
        lands right after it and then costs no search at all, and a search for a
        nearby index starts from it. While it is known the finger is on its block.

        Typing by ``_hot_client`` grows it while its end index stays at most
        ``_hot_stop`` (-1 when it cannot grow: a values run, or one whose last
        element is not the newest); the next typed element's counter is its
        index plus ``_hot_shift``. Typed text first goes to ``_pend``, a list
        of the typed pieces that :meth:`_sync` joins into the run, so that a
        keystroke costs a list append and one field: ``_hot_end`` already
        counts it, while the run, block and document lengths and ``_max`` do
        not (appending beats concatenating, which copies what is pending).
        Every public method but :meth:`type_text` calls :meth:`_sync` first."""

    # -- reading -------------------------------------------------------------

    @property
    def length(self) -> int:
        """Visible elements."""
        self._sync()
        return self._len

    @property
    def clock(self) -> int:
        """The greatest counter seen: a new element gets ``clock + 1``."""
        self._sync()
        return self._max

    @property
    def cursor(self) -> int | None:
        """The visible index right after the last local index op, when known:
        where the next keystroke is cheapest."""
        return self._hot_end

    def runs(self) -> Iterator[Run]:
        """Every run in document order (to read: a run is changed only here)."""
        self._sync()
        for blk in self._blocks:
            yield from blk.runs

    def visible_contents(self) -> list[Any]:
        """The content of every visible run in document order (a str of text or
        a list of values each): what a read shows, gathered at C speed."""
        self._sync()
        return [run.content for blk in self._blocks for run in blk.runs if run.vis]

    def run_count(self) -> int:
        """How many runs hold the elements (what the sequence's memory grows with)."""
        self._sync()
        return sum(len(blk.runs) for blk in self._blocks)

    def runs_per_block(self) -> list[int]:
        """How many runs each block holds (for tests of the block limit)."""
        self._sync()
        return [len(blk.runs) for blk in self._blocks]

    def has(self, client: int, counter: int) -> bool:
        """Whether element ``(client, counter)`` exists, visible or deleted."""
        if self._pend:
            self._sync()
        return self._lookup(client, counter) is not None

    def contains(self, client: int, counter: int, n: int) -> bool:
        """Whether all of ``counter .. counter + n - 1`` of ``client`` exist."""
        if self._pend:
            self._sync()
        while n > 0:
            found = self._lookup(client, counter)
            if found is None:
                return False
            run, off = found
            step = run.n - off
            counter += step
            n -= step
        return True

    def pieces(self, client: int, counter: int, n: int) -> list[Piece] | None:
        """Elements ``counter .. counter + n - 1`` of ``client`` as they lie
        in runs: for each stretch within one run, its first counter, its
        length, its content (a slice of the run's str or list; None when
        deleted) and the id of the element right before it in document order
        (None: the head). None when one of them does not exist."""
        if self._pend:
            self._sync()
        out: list[Piece] = []
        while n > 0:
            found = self._lookup(client, counter)
            if found is None:
                return None
            run, off = found
            k = run.n - off
            if k > n:
                k = n
            content = run.content[off : off + k] if run.vis else None
            before = (client, counter - 1) if off else self._before(run)
            out.append((counter, k, content, before))
            counter += k
            n -= k
        return out

    def _before(self, run: Run) -> Origin:
        """The last element of the run before ``run`` in document order."""
        blk = run.blk
        runs = blk.runs
        ri = runs.index(run)
        if ri:
            prev = runs[ri - 1]
            return (prev.client, prev.counter + prev.n - 1)
        blocks = self._blocks
        bi = self._block_index(blk)
        while bi:
            bi -= 1
            runs = blocks[bi].runs
            if runs:
                prev = runs[-1]
                return (prev.client, prev.counter + prev.n - 1)
        return None

    # -- editing at an index (local ops) --------------------------------------

    def type_text(self, index: int, text: str, client: int) -> int:
        """Typing at the cursor: when ``text`` (non-empty) by ``client`` at
        ``index`` can simply grow the hot run, do so and return the first new
        counter (its origin is the counter before, of the same client); else
        0 and nothing changes. The text waits in ``_pend`` until the next
        other call, so that a keystroke costs next to nothing."""
        if index == self._hot_end:
            end = index + len(text)
            if end <= self._hot_stop and client == self._hot_client:
                self._pend.append(text)
                self._hot_end = end
                return index + self._hot_shift
        return 0

    def insert_text(self, index: int, text: str, client: int) -> tuple[Origin, int] | None:
        """Insert ``text`` (non-empty) at visible ``index`` with fresh counters:
        (origin, first counter), or None when ``index`` is out of range or the
        counters would pass ``MAX_COUNTER``."""
        if self._pend:
            self._sync()
        n = len(text)
        if self._max + n > MAX_COUNTER:
            return None
        if index == self._hot_end:
            return self._insert_hot(index, text, client)
        if 0 <= index <= self._len:
            return self._insert_local(index, client, text, n)
        return None

    def insert_at(self, index: int, client: int, content: Any, n: int) -> tuple[Origin, int]:
        """Insert ``n`` elements (a str or a list) at visible ``index`` (0 to
        length) with fresh counters (room checked); return (origin, first counter)."""
        self._sync()
        return self._insert_local(index, client, content, n)

    def insert_after(self, origin: Origin, client: int, content: Any, n: int) -> int:
        """Insert right after element ``origin`` (it exists) with fresh counters; return the first."""
        self._sync()
        counter = self._max + 1
        if origin is None:
            bi = ri = 0
        else:
            bi, ri, run, off = self._after_point(origin)
            if off < run.n - 1:
                self._split(run.blk, ri, off + 1)
            ri += 1
        self._max = counter + n - 1
        _, bi, _ = self._place(bi, ri, client, counter, n, content, origin)
        self._drop_hot()
        self._set_finger(bi)
        return counter

    def delete_at(self, index: int, count: int) -> list[list[int]] | None:
        """Delete visible ``index .. index + count - 1`` (``count`` > 0); return
        the ids as ranges ``[client, first, count]``, or None when out of range.
        Deleting the end of the hot run (backspace) takes a short path."""
        if self._pend:
            self._sync()
        if index < 0 or index + count > self._len:
            return None
        run = self._hot
        if run is not None and index + count == self._hot_end and count < run.vis:
            return self._backspace(run, count)
        return self._delete_at(index, count)

    # -- elements made elsewhere (deltas, merges) -------------------------------

    def integrate(self, client: int, counter: int, n: int, content: Any, origin: Origin) -> bool:
        """Insert elements made elsewhere at their RGA place after ``origin``;
        False, with nothing changed, when the first is here already (an op's
        elements arrive together or not at all). ValueError, with nothing
        changed, when ``origin`` is unknown. ``content`` None integrates them
        as already deleted."""
        if self._pend:
            self._sync()
        if self._lookup(client, counter) is not None:
            return False
        self._integrate(client, counter, n, content, origin)
        return True

    def delete_ranges(self, ranges: Iterable[Range], bulk: bool | None = None) -> None:
        """Delete the elements of ``ranges`` (they exist; deleted ones stay so).

        Many ranges, or many ids, go in one pass over the blocks they touch
        (:meth:`_delete_bulk`); a few, one range at a time. ``bulk`` forces
        one way or the other (tests and perf studies compare the two: they
        leave the same elements, ids and contents, and the pass at most as
        many runs)."""
        if self._pend:
            self._sync()
        if not isinstance(ranges, list):
            ranges = list(ranges)
        if not ranges:
            return
        if bulk is None:
            bulk = self.bulk_pays(ranges)
        if bulk:
            self._delete_bulk(ranges)
            return
        for client, counter, count in ranges:
            self._delete_range(client, counter, count)

    def contains_ranges(self, ranges: Sequence[Range]) -> bool:
        """Whether every element of ``ranges`` exists: :meth:`contains` of
        each. A select-all delete checks every run of the document so: the
        ranges of a writer that has many go together, by maps over a flat
        copy of its runs (:func:`_unsettled`), and only those that do not
        lie within one run that they start are looked up one by one
        (0.072 s for 96,000 ranges of as many runs, about what the delete
        itself took), each by one slice of the writer's runs
        (:func:`_covered`)."""
        if self._pend:
            self._sync()
        index = self._index()
        for client, same in groupby(ranges, _client_of):
            entry = index.get(client)
            if entry is None:
                return False
            for _, counter, n in _unsettled(entry, list(same)):
                if not _covered(entry, counter, counter + n):
                    return False
        return True

    def bulk_pays(self, ranges: Sequence[Range]) -> bool:
        """Whether :meth:`delete_ranges` deletes ``ranges`` in one pass over
        the blocks (``BULK_RANGES``, ``BULK_DENSITY``, ``BULK_IDS``)."""
        n = len(ranges)
        if n >= BULK_RANGES and n >= BULK_DENSITY * len(self._blocks):
            return True
        return n > 0 and sum(map(_count_of, ranges)) >= BULK_IDS * n

    def merge(self, other: RunSeq) -> None:
        """Join ``other`` (which may be this very sequence) into this one."""
        self._sync()
        other._sync()
        # Theirs as plain tuples first: ``other`` may be ``self``.
        theirs = [(r.client, r.counter, r.n, r.content, r.origin) for r in other._runs()]
        # Causal order: an origin always has a smaller counter than its element.
        theirs.sort(key=lambda item: item[1])
        for client, counter, n, content, origin in theirs:
            self._merge_run(client, counter, n, content, origin)
        self.delete_ranges(
            [(client, counter, n) for client, counter, n, content, _ in theirs if content is None]
        )

    # -- whole sequences -------------------------------------------------------

    @classmethod
    def load(cls, runs: list[Run]) -> RunSeq:
        """A sequence of ``runs``: new ones (their block :data:`NO_BLOCK`), in
        document order, handed over for good. ValueError when their ids overlap
        or an origin is missing (a state no replica could make)."""
        seq = cls()
        seq._load(runs)
        seq._check_loaded()
        return seq

    def clone(self) -> RunSeq:
        """An independent copy: new runs, sharing their contents (no routine here
        changes a content in place; growing or cutting one makes a new one)."""
        self._sync()
        copy = RunSeq()
        copy._load(
            [Run(r.client, r.counter, r.n, r.vis, r.content, r.origin, r.blk) for r in self._runs()]
        )
        return copy

    # -- the id index ------------------------------------------------------

    def _index(self) -> dict[int, ClientRuns]:
        ids = self._ids
        if ids is None:
            by_client: dict[int, list[Run]] = {}
            for blk in self._blocks:
                for run in blk.runs:
                    lst = by_client.get(run.client)
                    if lst is None:
                        by_client[run.client] = [run]
                    else:
                        lst.append(run)
            ids = {}
            for client, lst in by_client.items():
                lst.sort(key=_counter_of)
                ids[client] = ClientRuns(lst)
            self._ids = ids
        return ids

    def _index_add(self, run: Run) -> None:
        ids = self._ids
        if ids is None:
            return
        entry = ids.get(run.client)
        if entry is None:
            ids[run.client] = ClientRuns([run])
        else:
            entry.add(run)

    def _index_remove(self, run: Run) -> None:
        ids = self._ids
        if ids is None:
            return
        if not ids[run.client].remove(run):
            del ids[run.client]

    def _reindex(self, removed: list[Run], added: list[Run]) -> None:
        """Take ``removed`` out of the id index and put ``added`` in (the
        index exists). A client with few of them changes run by run; one
        with many against its runs (a bulk delete that joined every deleted
        run of a writer) gets its entry built again, which costs about what
        ``INDEX_REBUILD`` changes do."""
        ids = self._ids
        assert ids is not None
        by_client: dict[int, tuple[list[Run], list[Run]]] = {}
        for run in removed:
            by_client.setdefault(run.client, ([], []))[0].append(run)
        for run in added:
            by_client.setdefault(run.client, ([], []))[1].append(run)
        for client, (out, new) in by_client.items():
            entry = ids.get(client)
            size = 0 if entry is None else sum(map(len, entry.keys))
            if entry is None or INDEX_REBUILD * (len(out) + len(new)) < size:
                for run in out:
                    self._index_remove(run)
                for run in new:
                    self._index_add(run)
                continue
            gone = set(out)
            kept = [run for run in entry if run not in gone]
            kept += new
            kept.sort(key=_counter_of)  # two sorted runs: a merge
            # Not empty: a run goes only by joining one of the same client.
            ids[client] = ClientRuns(kept)

    def _lookup(self, client: int, counter: int) -> tuple[Run, int] | None:
        """The run holding element ``(client, counter)`` and the element's offset in it."""
        entry = self._index().get(client)
        if entry is None:
            return None
        run = entry.find(counter)
        if run is None:
            return None
        off = counter - run.counter
        if off >= run.n:
            return None
        return run, off

    # -- blocks ------------------------------------------------------------

    def _block_index(self, blk: Block) -> int:
        if blk.idx >= self._dirty:
            blocks = self._blocks
            for i in range(self._dirty, len(blocks)):
                blocks[i].idx = i
            self._dirty = len(blocks)
        return blk.idx

    def _fix_block(self, bi: int) -> None:
        """Split block ``bi`` in two when it has grown past ``BLOCK_MAX`` runs."""
        blk = self._blocks[bi]
        runs = blk.runs
        if len(runs) <= BLOCK_MAX:
            return
        half = len(runs) // 2
        moved = runs[half:]
        del runs[half:]
        new = Block(moved, bi + 1)
        vis = 0
        for run in moved:
            run.blk = new
            vis += run.vis
        self._blocks.insert(bi + 1, new)
        self._bvis[bi] -= vis
        self._bvis.insert(bi + 1, vis)
        if self._dirty > bi + 1:
            self._dirty = bi + 1
        if self._hot is not None and self._hot.blk is new:
            self._hot_bi = bi + 1
            self._hot_ri -= half
            if self._fbi == bi and self._fstart is not None:
                self._fbi = bi + 1
                self._fstart += self._bvis[bi]

    def _split(self, blk: Block, ri: int, k: int) -> Run:
        """Split ``blk.runs[ri]`` before its element ``k`` (0 < k < n); return the second part."""
        run = blk.runs[ri]
        client = run.client
        counter = run.counter + k
        rest = run.n - k
        if run.vis:
            content = run.content
            second = Run(client, counter, rest, rest, content[k:], (client, counter - 1), blk)
            run.vis = k
            run.content = content[:k]
        else:
            second = Run(client, counter, rest, 0, None, (client, counter - 1), blk)
        run.n = k
        blk.runs.insert(ri + 1, second)
        if self._ids is not None:
            self._ids[client].add(second)
        if self._hot is run:
            # The hot run now ends earlier; its end index is no longer known.
            self._drop_hot()
        return second

    def _coalesce(self, bi: int, lo: int, hi: int) -> None:
        """Join deleted neighbours among ``runs[lo-1 .. hi+1]`` that continue one chain."""
        runs = self._blocks[bi].runs
        j = lo if lo > 1 else 1
        end = len(runs) - 1
        if hi + 1 < end:
            end = hi + 1
        while j <= end:
            a = runs[j - 1]
            b = runs[j]
            if (
                not a.vis
                and not b.vis
                and b.client == a.client
                and b.counter == a.counter + a.n
                and b.origin == (a.client, b.counter - 1)
            ):
                a.n += b.n
                del runs[j]
                self._index_remove(b)
                if self._hot is b:
                    self._drop_hot()
                end -= 1
            else:
                j += 1

    # -- positions ---------------------------------------------------------

    def _seek(self, i: int) -> tuple[int, int, int]:
        """Block, run and offset of visible element ``i`` (0 <= i < length).

        Moves the finger there and forgets the hot run (the caller sets a new one).
        """
        bvis = self._bvis
        hot = self._hot
        if hot is not None:
            # Edits are local: the target is often in the hot run's block (the
            # finger's), and then near the hot run.
            hot_end = self._hot_end
            assert hot_end is not None and self._fstart is not None
            bi = self._hot_bi
            start = self._fstart
            self._hot = self._hot_end = None
            if start <= i < start + bvis[bi]:
                runs = self._blocks[bi].runs
                ri = self._hot_ri
                hot_start = hot_end - hot.vis
                if i < hot_start and hot_start - i <= i - start:
                    off = hot_start - i
                    while True:
                        ri -= 1
                        v = runs[ri].vis
                        if off <= v:
                            return bi, ri, v - off
                        off -= v
                if i < hot_start:
                    ri = 0
                    off = i - start
                else:
                    off = i - hot_start
                while True:
                    v = runs[ri].vis
                    if off < v:
                        return bi, ri, off
                    off -= v
                    ri += 1
        bi = self._fbi
        known = self._fstart
        start = sum(bvis[:bi]) if known is None else known
        if i < start:
            while i < start:
                bi -= 1
                start -= bvis[bi]
        else:
            v = bvis[bi]
            while i >= start + v:
                start += v
                bi += 1
                v = bvis[bi]
        self._fbi = bi
        self._fstart = start
        off = i - start
        runs = self._blocks[bi].runs
        back = bvis[bi] - off
        if back < off:
            # Nearer the block's end: walk back from there.
            ri = len(runs)
            while True:
                ri -= 1
                v = runs[ri].vis
                if back <= v:
                    return bi, ri, v - back
                back -= v
        ri = 0
        while True:
            v = runs[ri].vis
            if off < v:
                return bi, ri, off
            off -= v
            ri += 1

    def _sync(self) -> None:
        """Move the pending typed text into the hot run.

        The entry points that edits and deltas go through test ``_pend``
        before calling this, to spare the call when nothing is pending."""
        pend = self._pend
        if pend:
            run = self._hot
            assert run is not None
            text = pend[0] if len(pend) == 1 else "".join(pend)
            pend.clear()
            n = len(text)
            run.content += text
            run.n += n
            run.vis += n
            self._bvis[self._hot_bi] += n
            self._len += n
            assert self._hot_end is not None
            self._max = self._hot_end + self._hot_shift - 1

    def _drop_hot(self) -> None:
        assert not self._pend
        self._hot = None
        self._hot_end = None

    def _set_hot(self, run: Run, bi: int, ri: int, end: int) -> None:
        """Make ``run`` (block ``bi``, position ``ri``, ending before ``end``) hot.

        ``_pend`` must be empty (every caller has synced).
        """
        self._hot = run
        self._hot_client = run.client
        self._hot_bi = bi
        self._hot_ri = ri
        self._hot_end = end
        top = self._max
        first = run.counter
        if first + run.n > top and type(run.content) is str:
            # Counters and indexes advance together while typing goes on here.
            shift = top + 1 - end
            cap = first + RUN_MAX
            self._hot_shift = shift
            self._hot_stop = (cap if cap <= MAX_COUNTER else MAX_COUNTER + 1) - shift
        else:
            self._hot_stop = -1
        if bi != self._fbi or self._fstart is None:
            self._move_finger(bi)

    def _move_finger(self, bi: int) -> None:
        fbi = self._fbi
        start = self._fstart
        if bi == fbi + 1 and start is not None:
            self._fstart = start + self._bvis[fbi]
        else:
            self._fstart = sum(self._bvis[:bi])
        self._fbi = bi

    def _set_finger(self, bi: int) -> None:
        """Put the finger on block ``bi``; its start is summed up when a seek needs it."""
        self._fbi = bi
        self._fstart = None

    def _place(
        self, bi: int, ri: int, client: int, counter: int, n: int, content: Any, origin: Origin
    ) -> tuple[Run, int, int]:
        """Put new elements before ``runs[ri]`` of block ``bi`` (``content`` None: deleted ones).

        Extends the run before that point when the new elements continue its
        chain. Returns the run now holding them (the last of them), and its
        block and position.
        """
        if n > RUN_MAX and content is not None:
            # Visible runs of at most RUN_MAX elements each: a split copies
            # what follows it, and deleting every other element of one long
            # insert (one op of ids) copied the rest of it per element.
            step = 0
            while n - step > RUN_MAX:
                _, bi, ri = self._place(
                    bi, ri, client, counter + step, RUN_MAX, content[step : step + RUN_MAX], origin
                )
                ri += 1
                step += RUN_MAX
                origin = (client, counter + step - 1)
            return self._place(bi, ri, client, counter + step, n - step, content[step:], origin)
        blk = self._blocks[bi]
        runs = blk.runs
        vis = 0 if content is None else n
        if ri:
            prev = runs[ri - 1]
            if (
                prev.client == client
                and prev.counter + prev.n == counter
                and prev.n < RUN_MAX
                and type(prev.content) is type(content)
                and origin == (client, counter - 1)
            ):
                if vis:
                    prev.content = prev.content + content
                    prev.vis += n
                    self._bvis[bi] += n
                    self._len += n
                prev.n += n
                return prev, bi, ri - 1
        run = Run(client, counter, n, vis, content, origin, blk)
        runs.insert(ri, run)
        if self._ids is not None:
            self._index_add(run)
        self._bvis[bi] += vis
        self._len += vis
        if len(runs) > BLOCK_MAX:
            self._fix_block(bi)
            if run.blk is not blk:
                bi += 1
                ri = run.blk.runs.index(run)
        return run, bi, ri

    def _after_point(self, origin: tuple[int, int]) -> tuple[int, int, Run, int]:
        """Block and run position of element ``origin`` (ValueError when unknown),
        with its run and its offset in it."""
        found = self._lookup(*origin)
        if found is None:
            raise ValueError(f"rga: unknown element {origin[1]}@{origin[0]}")
        run, off = found
        blk = run.blk
        bi = self._block_index(blk)
        ri = blk.runs.index(run)
        return bi, ri, run, off

    def _insert_local(self, index: int, client: int, content: Any, n: int) -> tuple[Origin, int]:
        """Insert at visible ``index`` with fresh counters; return (origin, first counter)."""
        counter = self._max + 1
        origin: Origin
        if index == 0:
            bi = ri = 0
            origin = None
            self._drop_hot()
            self._fbi = 0
            self._fstart = 0
        else:
            bi, ri, off = self._seek(index - 1)
            blk = self._blocks[bi]
            run = blk.runs[ri]
            origin = (run.client, run.counter + off)
            if off < run.n - 1:
                self._split(blk, ri, off + 1)
            ri += 1
        self._max = counter + n - 1
        run, bi, ri = self._place(bi, ri, client, counter, n, content, origin)
        self._set_hot(run, bi, ri, index + n)
        return origin, counter

    def _insert_hot(self, index: int, text: str, client: int) -> tuple[Origin, int]:
        """Insert at the cursor right after the hot run when it cannot simply grow."""
        run = self._hot
        assert run is not None
        origin = (run.client, run.counter + run.n - 1)
        counter = self._max + 1
        n = len(text)
        self._max = counter + n - 1
        new, bi, ri = self._place(self._hot_bi, self._hot_ri + 1, client, counter, n, text, origin)
        self._set_hot(new, bi, ri, index + n)
        return origin, counter

    def _integrate(self, client: int, counter: int, n: int, content: Any, origin: Origin) -> None:
        """Insert elements made elsewhere (origin exists, they do not) at their RGA place.

        ``content`` None integrates them as already deleted (merging states).
        """
        blocks = self._blocks
        if origin is None:
            bi = ri = 0
        else:
            last = self._last
            if last is not None and last[0].client == origin[0]:
                # A stream of deltas (a replica following a writer) mostly
                # continues the run the previous one wrote: skip the lookup
                # when that run is still where it was.
                run, bi, ri = last
                off = run.n - 1
                if run.counter + off != origin[1] or not (
                    bi < len(blocks) and ri < len(blocks[bi].runs) and blocks[bi].runs[ri] is run
                ):
                    bi, ri, run, off = self._after_point(origin)
            else:
                bi, ri, run, off = self._after_point(origin)
            ri += 1
            if off < run.n - 1:
                nxt = run.counter + off + 1
                if nxt < counter or (nxt == counter and run.client < client):
                    # The new elements go between the two parts.
                    self._split(run.blk, ri - 1, off + 1)
                    self._finish_integrate(bi, ri, client, counter, n, content, origin)
                    return
        # Skip every following run whose first id is greater than the new one.
        runs = blocks[bi].runs
        while True:
            if ri == len(runs):
                if bi + 1 == len(blocks):
                    break
                bi += 1
                ri = 0
                runs = blocks[bi].runs
                continue
            nx = runs[ri]
            if nx.counter > counter or (nx.counter == counter and nx.client > client):
                ri += 1
                continue
            break
        self._finish_integrate(bi, ri, client, counter, n, content, origin)

    def _finish_integrate(
        self, bi: int, ri: int, client: int, counter: int, n: int, content: Any, origin: Origin
    ) -> None:
        if ri == 0 and bi > 0:
            # Keep the new elements next to their predecessor so they can extend its run.
            bi -= 1
            ri = len(self._blocks[bi].runs)
        run, bi, ri = self._place(bi, ri, client, counter, n, content, origin)
        self._last = (run, bi, ri)
        last = counter + n - 1
        if last > self._max:
            self._max = last
        self._drop_hot()
        self._set_finger(bi)

    def _delete_at(self, index: int, count: int) -> list[list[int]]:
        """Delete visible ``index .. index + count - 1``; return the ids as ranges."""
        bi, ri, off = self._seek(index)
        blocks = self._blocks
        bvis = self._bvis
        first_bi = bi
        blk = blocks[bi]
        runs = blk.runs
        run = runs[ri]
        if off:
            run = self._split(blk, ri, off)
            ri += 1
        # The cursor ends up right after the deletion: remember it when the
        # element before it ends the run before.
        if ri:
            before = runs[ri - 1]
            if before.vis:
                self._set_hot(before, bi, ri - 1, index)
        ids = self._ids
        out: list[list[int]] = []
        last = [0, 0, 0]
        left = count
        while True:
            v = run.vis
            if v:
                if left < v:
                    self._split(blk, ri, left)
                    v = left
                run.vis = 0
                run.content = None
                bvis[bi] -= v
                client = run.client
                counter = run.counter
                if last[1] + last[2] == counter and last[0] == client and out:
                    last[2] += v
                else:
                    last = [client, counter, v]
                    out.append(last)
                left -= v
                if ri:
                    # Join a deleted run before that this one continues.
                    prev = runs[ri - 1]
                    if (
                        not prev.vis
                        and prev.counter + prev.n == counter
                        and prev.client == client
                        and run.origin == (client, counter - 1)
                    ):
                        prev.n += run.n
                        del runs[ri]
                        if ids is not None:
                            self._index_remove(run)
                        ri -= 1
                        run = prev
                if not left:
                    break
            ri += 1
            if ri == len(runs):
                bi += 1
                ri = 0
                blk = blocks[bi]
                runs = blk.runs
            run = runs[ri]
        self._len -= count
        if ri + 1 < len(runs):
            # Join a deleted run after the last one deleted when it continues it.
            nxt = runs[ri + 1]
            if (
                not nxt.vis
                and nxt.counter == run.counter + run.n
                and nxt.client == run.client
                and nxt.origin == (run.client, nxt.counter - 1)
            ):
                run.n += nxt.n
                del runs[ri + 1]
                if ids is not None:
                    self._index_remove(nxt)
        if len(runs) > BLOCK_MAX:
            self._fix_block(bi)
        if first_bi != bi:
            self._fix_block(first_bi)
        return out

    def _backspace(self, run: Run, count: int) -> list[list[int]]:
        """Delete the last ``count`` elements of the hot run (which keeps at least one)."""
        client = run.client
        keep = run.n - count
        first = run.counter + keep
        run.n = keep
        run.vis = keep
        run.content = run.content[:keep]
        self._hot_stop = -1  # its last element is no longer the newest
        self._bvis[self._hot_bi] -= count
        self._len -= count
        assert self._hot_end is not None
        self._hot_end -= count
        ri = self._hot_ri + 1
        runs = run.blk.runs
        nxt = runs[ri] if ri < len(runs) else None
        if (
            nxt is not None
            and not nxt.vis
            and nxt.client == client
            and nxt.counter == first + count
            and nxt.origin == (client, first + count - 1)
        ):
            # The elements join the deleted run after them (repeated backspace).
            if self._ids is not None:
                self._ids[client].rekey(nxt, first)
            nxt.counter = first
            nxt.n += count
            nxt.origin = (client, first - 1)
        else:
            dead = Run(client, first, count, 0, None, (client, first - 1), run.blk)
            runs.insert(ri, dead)
            self._index_add(dead)
            if len(runs) > BLOCK_MAX:
                self._fix_block(self._hot_bi)
        return [[client, first, count]]

    def _delete_range(self, client: int, counter: int, count: int) -> None:
        """Delete elements ``counter .. counter + count - 1`` of ``client`` (they exist)."""
        bvis = self._bvis
        while count > 0:
            found = self._lookup(client, counter)
            assert found is not None
            run, off = found
            take = run.n - off
            if count < take:
                take = count
            if run.vis:
                blk = run.blk
                bi = self._block_index(blk)
                ri = blk.runs.index(run)
                if off:
                    run = self._split(blk, ri, off)
                    ri += 1
                if take < run.n:
                    self._split(blk, ri, take)
                run.vis = 0
                run.content = None
                bvis[bi] -= take
                self._len -= take
                self._coalesce(bi, ri, ri)
                self._fix_block(bi)
            counter += take
            count -= take
        self._drop_hot()
        self._fbi = 0
        self._fstart = 0

    def _delete_bulk(self, ranges: list[Range]) -> None:
        """:meth:`_delete_range` of every one of ``ranges``, in one pass over
        each block they touch.

        Deleting range by range costs, for every run it touches, a lookup,
        the block's position, the run's position in the block, a join with
        its neighbours and a check of the block's size: about 1.2 us a run
        here, 0.12 s for a select-all of a document cut into 96,000 runs
        (two writers in turn), and 0.99 s was seen on a loaded machine.

        Here the runs are found first, a writer at a time: by maps over a
        flat copy of its runs when its ranges are many (:func:`_mark_many`),
        else by slices of its id index (:meth:`ClientRuns.span`). A visible
        run wholly inside a range is *dead*; one a range cuts (at most the
        first and last of each) gets the stretches to delete. Then each
        block with such runs is passed over once, the last block first:
        dead runs marked deleted, cut runs split into their visible and
        deleted stretches (:func:`_cut_run`), and each deleted run joined
        to a deleted run before it that it continues, as :meth:`_coalesce`
        joins around each run it deletes (over the whole block when many of
        its runs change; else over each and a neighbour each side). The
        block's visible count and the document's are fixed once, the id
        index once for all the runs split off and joined away
        (:meth:`_reindex`), and blocks grown past ``BLOCK_MAX`` are split
        last, from the last, so that the positions of those before stay
        true. The hot run is dropped and the finger reset, as
        :meth:`_delete_range` does.

        The elements, ids and contents come out as range by range; the
        runs may differ where range by range split a block between two
        deleted runs before it could join them, never to more runs.
        """
        index = self._index()
        self._drop_hot()
        dead: list[Run] = []
        cut: dict[Run, list[tuple[int, int]]] = {}
        for client, same in groupby(ranges, _client_of):
            entry = index[client]
            mine = list(same)
            if not _mark_many(entry, mine, dead, cut):
                for _, counter, count in mine:
                    _mark(entry, counter, counter + count, dead, cut)
        # The blocks to pass over, and how many of their runs change there.
        # A run both dead and cut (ranges that overlap) is dead: the block
        # pass looks at ``dead`` first.
        live = list(compress(dead, map(_vis_of, dead)))
        counts = Counter(map(_blk_of, live))
        counts.update(map(_blk_of, cut))
        if not counts:
            return
        sparse: dict[Block, list[Run]] = {
            blk: [] for blk, k in counts.items() if SPARSE_BLOCK * k < len(blk.runs)
        }
        if sparse:
            for run in chain(live, cut):
                group = sparse.get(run.blk)
                if group is not None:
                    group.append(run)
        doomed = set(dead)
        order = sorted(((self._block_index(blk), blk) for blk in counts), key=_first, reverse=True)
        bvis = self._bvis
        removed: list[Run] = []
        added: list[Run] = []
        gone = 0
        for bi, blk in order:
            runs = blk.runs
            few = sparse.get(blk)
            if few is None:
                spans = [[0, len(runs)]]
            else:
                # A few runs of the block: pass over each and a neighbour each
                # side (where :meth:`_coalesce` looks), the last first.
                spans = _windows(sorted(set(map(runs.index, few))), len(runs))
            lost = 0
            for lo, hi in spans:
                out: list[Run] = []
                keep = out.append
                prev = NO_RUN  # the last run of ``out``
                for run in runs[lo:hi]:
                    if run.vis:
                        if run in doomed:
                            lost += run.vis
                            run.vis = 0
                            run.content = None
                        elif run in cut:
                            lost += _cut_run(run, cut[run], out, added, removed)
                            prev = out[-1]
                            continue
                        else:
                            keep(run)
                            prev = run
                            continue
                    if (
                        not prev.vis
                        and prev.counter + prev.n == run.counter
                        and prev.client == run.client
                        and run.origin == (run.client, run.counter - 1)
                    ):
                        prev.n += run.n
                        removed.append(run)
                        continue
                    keep(run)
                    prev = run
                runs[lo:hi] = out
            bvis[bi] -= lost
            gone += lost
        self._len -= gone
        if removed or added:
            self._reindex(removed, added)
        blocks = self._blocks
        for bi, _ in order:
            if len(blocks[bi].runs) > BLOCK_MAX:
                # Halves, the second first, until each is small enough.
                todo = [bi]
                while todo:
                    at = todo.pop()
                    if len(blocks[at].runs) > BLOCK_MAX:
                        self._fix_block(at)
                        todo.append(at)
                        todo.append(at + 1)
        self._fbi = 0
        self._fstart = 0

    def _merge_run(self, client: int, first: int, n: int, content: Any, origin: Origin) -> None:
        """Integrate the elements of one of their runs that this sequence lacks."""
        counter = first
        end = first + n
        while counter < end:
            found = self._lookup(client, counter)
            if found is not None:
                run, off = found
                counter += run.n - off
                continue
            entry = self._index().get(client)
            key = entry.next_key(counter) if entry is not None else None
            stop = end if key is None else min(end, key)
            k = counter - first
            part = None if content is None else content[k : k + stop - counter]
            self._integrate(
                client, counter, stop - counter, part, origin if k == 0 else (client, counter - 1)
            )
            counter = stop

    # -- whole-sequence views ------------------------------------------------

    def _runs(self) -> Iterator[Run]:
        for blk in self._blocks:
            yield from blk.runs

    def _load(self, runs: list[Run]) -> None:
        """Replace the whole sequence by ``runs`` (document order, fresh objects)."""
        if any(run.vis > RUN_MAX for run in runs):
            runs = _bounded(runs)
        half = BLOCK_MAX // 2
        blocks: list[Block] = []
        bvis: list[int] = []
        length = 0
        top = 0
        for start in range(0, max(len(runs), 1), half):
            chunk = runs[start : start + half]
            blk = Block(chunk, len(blocks))
            vis = 0
            for run in chunk:
                run.blk = blk
                vis += run.vis
                end = run.counter + run.n - 1
                if end > top:
                    top = end
            blocks.append(blk)
            bvis.append(vis)
            length += vis
        self._blocks = blocks
        self._bvis = bvis
        self._dirty = len(blocks)
        self._len = length
        self._max = top
        self._last = None
        self._ids = None
        self._fbi = 0
        self._fstart = 0
        self._drop_hot()

    def _check_loaded(self) -> None:
        """Refuse a state whose ids overlap or whose origins are missing."""
        for runs in self._index().values():
            for a, b in pairwise(runs):
                if a.counter + a.n > b.counter:
                    raise ValueError(f"rga state: element {format_id(b.client, b.counter)} twice")
        for run in self._runs():
            if run.origin is not None and self._lookup(*run.origin) is None:
                raise ValueError(f"rga state: unknown origin {format_id(*run.origin)}")


def _bounded(runs: list[Run]) -> list[Run]:
    """``runs`` with every visible one longer than ``RUN_MAX`` cut into runs
    of ``RUN_MAX`` (the last shorter), as :meth:`RunSeq._place` makes them: a
    state shows each chain as one run, however long."""
    out: list[Run] = []
    for run in runs:
        n = run.n
        if not run.vis or n <= RUN_MAX:
            out.append(run)
            continue
        client, counter, content, origin = run.client, run.counter, run.content, run.origin
        for step in range(0, n, RUN_MAX):
            k = min(RUN_MAX, n - step)
            out.append(Run(client, counter + step, k, k, content[step : step + k], origin, run.blk))
            origin = (client, counter + step + k - 1)
    return out


_counter_of = attrgetter("counter")


def _first(item: tuple[int, Block]) -> int:
    return item[0]


def _windows(where: list[int], size: int) -> list[list[int]]:
    """The stretches ``[p - 1, p + 2)`` around each of the sorted positions
    ``where`` in a block of ``size`` runs, joined where they meet, the last first."""
    out: list[list[int]] = []
    for p in where:
        lo = p - 1 if p else 0
        hi = p + 2 if p + 2 < size else size
        if out and lo <= out[-1][1]:
            out[-1][1] = hi
        else:
            out.append([lo, hi])
    out.reverse()
    return out


_client_of = itemgetter(0)
_count_of = itemgetter(2)
_vis_of = attrgetter("vis")
_blk_of = attrgetter("blk")
_n_of = attrgetter("n")


def _flat(entry: ClientRuns, ranges: int) -> tuple[list[Run], dict[int, int], list[int]] | None:
    """``entry``'s runs laid out flat: the runs, a map from each one's first
    counter to its place, and the counter each ends before. None when
    ``ranges`` ranges are too few against its runs to pay for it
    (``FLAT_SHARE``)."""
    size = sum(map(len, entry.keys))
    if FLAT_SHARE * ranges < size:
        return None
    runs = list(chain.from_iterable(entry.runs))
    where = dict(zip(chain.from_iterable(entry.keys), range(size), strict=True))
    stops = list(map(add, map(_counter_of, runs), map(_n_of, runs)))
    return runs, where, stops


def _heads(where: dict[int, int], group: list[Range]) -> tuple[list[int], Iterator[int]]:
    """For each of ``group``, in order: the place in a flat layout
    (:func:`_flat`'s ``where``) of the run that starts where the range does
    (-1: none), and the counter the range ends before (lazily)."""
    starts = list(map(itemgetter(1), group))
    heads = list(map(where.get, starts, repeat(-1)))
    return heads, map(add, starts, map(itemgetter(2), group))


def _unsettled(entry: ClientRuns, group: list[Range]) -> list[Range]:
    """Those of ``group`` (ranges of ``entry``'s client) not found to exist
    at C speed: a range that starts where one of its runs does and ends
    within it exists. All of them when they are too few for that to pay."""
    flat = _flat(entry, len(group))
    if flat is None:
        return group
    _, where, stops = flat
    heads, ends = _heads(where, group)
    held = map(and_, map(ne, heads, repeat(-1)), map(ge, map(stops.__getitem__, heads), ends))
    return list(compress(group, map(not_, held)))


def _covered(entry: ClientRuns, counter: int, end: int) -> bool:
    """Whether ``entry``'s client has every element ``counter .. end - 1``:
    the run holding the first, and the runs after it up to ``end``, each
    starting where the one before stops. One slice of the index and a list
    comparison, not a lookup per run (a range of one writer typing
    backwards covers a run per element)."""
    run = entry.find(counter)
    if run is None:
        return False
    stop = run.counter + run.n
    if stop >= end:
        return True
    if stop <= counter:
        return False
    runs = entry.span(counter, end)
    firsts = list(map(_counter_of, runs))
    stops = list(map(add, firsts, map(_n_of, runs)))
    return stops[-1] >= end and firsts[1:] == stops[:-1]


def _mark(
    entry: ClientRuns,
    counter: int,
    end: int,
    dead: list[Run],
    cut: dict[Run, list[tuple[int, int]]],
) -> None:
    """For :meth:`RunSeq._delete_bulk`: put the runs of elements ``counter ..
    end - 1`` of ``entry``'s client in ``dead`` (held whole: to delete, if
    visible) or, for the (visible) one at either end that the range cuts, its
    offsets to delete in ``cut``."""
    runs = entry.span(counter, end)
    head = runs[0]
    tail = runs[-1]
    lo = 0
    hi = len(runs)
    if head.counter < counter or head.counter + head.n > end:
        lo = 1
        if head.vis:
            first = head.counter
            stretch = (max(counter, first) - first, min(end, first + head.n) - first)
            cut.setdefault(head, []).append(stretch)
    if hi > lo and tail.counter + tail.n > end:
        hi -= 1
        if tail.vis:
            cut.setdefault(tail, []).append((0, end - tail.counter))
    if hi - lo == 1:
        dead.append(runs[lo])
    elif hi > lo:
        dead.extend(runs[lo:hi])


def _mark_many(
    entry: ClientRuns, group: list[Range], dead: list[Run], cut: dict[Run, list[tuple[int, int]]]
) -> bool:
    """:func:`_mark` of every one of ``group`` (ranges of ``entry``'s client),
    at C speed for those that hold exactly one run, whole: a select-all of a
    document many writers typed in turn is all of that kind, a range per run.

    The client's runs are laid out flat, with a map from each one's first
    counter to its place and the counter each ends before; the run a range
    starts, and whether it ends there too, are then found for all ranges by
    mapping those over them: each step over every range is one C-level call
    (``bisect`` mapped the same way cost more: a dozen comparisons a range).
    False, with nothing done, when the ranges are too few against the
    client's runs for the flat copy to pay (``FLAT_SHARE``)."""
    flat = _flat(entry, len(group))
    if flat is None:
        return False
    runs, where, stops = flat
    heads, ends = _heads(where, group)
    # Whole and alone: a run starts where the range does and ends where it ends.
    simple = list(
        map(and_, map(ne, heads, repeat(-1)), map(eq, map(stops.__getitem__, heads), ends))
    )
    dead.extend(map(runs.__getitem__, compress(heads, simple)))
    if not all(simple):
        for at in compress(range(len(group)), map(not_, simple)):
            _, counter, n = group[at]
            _mark(entry, counter, counter + n, dead, cut)
    return True


def _cut_run(
    run: Run, stretches: list[tuple[int, int]], out: list[Run], added: list[Run], removed: list[Run]
) -> int:
    """Append ``run`` to ``out`` as its visible and deleted stretches
    (``stretches``: offsets ``[lo, hi)`` to delete, in any order, overlapping
    or not); return how many elements were deleted.

    The first stretch stays ``run`` (its first counter, the index's key,
    does not change); the others are new runs, put in ``added`` (the
    stretches of one run alternate, so none of them joins the one before).
    A deleted first stretch joins a deleted run before that it continues,
    as :meth:`RunSeq._delete_bulk` joins any: then ``run`` goes to ``removed``.
    """
    stretches.sort()
    merged: list[list[int]] = []
    for lo, hi in stretches:
        if merged and lo <= merged[-1][1]:
            if hi > merged[-1][1]:
                merged[-1][1] = hi
        else:
            merged.append([lo, hi])
    client = run.client
    base = run.counter
    n = run.n
    content = run.content
    blk = run.blk
    pieces: list[tuple[int, int, bool]] = []
    pos = 0
    for lo, hi in merged:
        if lo > pos:
            pieces.append((pos, lo, True))
        pieces.append((lo, hi, False))
        pos = hi
    if pos < n:
        pieces.append((pos, n, True))
    lost = 0
    for i, (lo, hi, vis) in enumerate(pieces):
        k = hi - lo
        if not vis:
            lost += k
        if i == 0:
            run.n = k
            run.vis = k if vis else 0
            run.content = content[:k] if vis else None
            if not vis and out:
                prev = out[-1]
                if (
                    not prev.vis
                    and prev.counter + prev.n == base
                    and prev.client == client
                    and run.origin == (client, base - 1)
                ):
                    prev.n += k
                    removed.append(run)
                    continue
            out.append(run)
        else:
            piece = Run(
                client,
                base + lo,
                k,
                k if vis else 0,
                content[lo:hi] if vis else None,
                (client, base + lo - 1),
                blk,
            )
            out.append(piece)
            added.append(piece)
    return lost


NO_BLOCK = Block([], -1)
"""The block of a run made for :meth:`RunSeq.load`, until it puts the run in
its own (a real Block, so that the types hold even where they are enforced,
as mypyc does)."""

NO_RUN = Run(0, 0, 0, 1, "", None, NO_BLOCK)
"""What :meth:`RunSeq._delete_bulk` takes as the run before the first it
passes over: visible, so that nothing joins it."""
