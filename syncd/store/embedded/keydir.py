"""The key directory: for every CRDT of the embedded store, its type, size and
where its retained history lies, kept on disk and read on first use.

Theory of operation
-------------------
Bitcask keeps its key directory in memory and saves it in hint files. At a
million CRDTs that would be a gigabyte of Python objects, read at every
start. Here the saved form is the directory itself: a table sorted by
``(ns, id)`` (``hint.py``), read a block at a time, and memory holds only an
*overlay* of the CRDTs in use:

- *clean* lives: read from the table and not changed since; the least
  recently used beyond :data:`CACHED_LIVES` leave memory (they are still in
  the table);
- *dirty* lives: changed since the table was written (an op, a checkpoint,
  a new type or size, a trim); they stay until a new table holds them;
- *gone* keys: deleted since the table was written, which the table still
  holds (a tombstone, so the table's row is not read back).

A lookup (:meth:`KeyDir._find`, through which every
:class:`~syncd.store.history_index.HistoryIndex` method reads) tries the
overlay, then the table.

Writing a table (:meth:`KeyDir.flush_plan`, :func:`write_table`,
:meth:`KeyDir.flushed`): once :data:`FLUSH_LIVES` lives are dirty, the
store takes a plan on the loop (the dirty keys move to *flushing*; later
changes make them dirty again) and merges it with the current table into a
new one in its I/O thread. The rows are encoded from the live objects, which
the loop may append to meanwhile: a row then holds ops past the table's
``end``, and the next start, which reads the frames after ``end``, finds
them held already. When the new table is in place the keys flushed and not
changed since become clean. A table is also written at a clean stop, so a
start reads the table and the frames written after it, nothing else.

Listings (:meth:`KeyDir.listing`) merge the table's rows after a cursor
with the overlay's ids after it, which :class:`SortedIds` keeps sorted per
namespace as lives enter and leave memory: a page costs its rows, not a
sort of the overlay.

Usage (the quotas': live CRDTs, bytes and unmeasured per namespace) is kept
as running sums, from the table's header and every change to a type or size
since (:meth:`KeyDir._account`), which also keeps their totals over every
namespace and marks the namespace for the ranking of the largest
(:class:`~syncd.store.catalogue.UsageBoard`, read by metrics).

Compaction (embedded/history.py) trims and relocates the overlay on the loop
and the table's rows in the I/O thread (:func:`table_positions`,
:func:`rewrite_table`), and puts a new table in place of the old.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import takewhile
from typing import Final

import msgpack

from syncd.store.base import Usage
from syncd.store.catalogue import MAX_SCAN, UNMEASURED, UsageBoard
from syncd.store.embedded.hint import (
    Entry,
    Header,
    Key,
    Table,
    TableWriter,
    column,
    column_bytes,
    joined,
    open_table,
)
from syncd.store.embedded.history_files import split
from syncd.store.history_index import HistoryIndex, Life, Retention, trim_life

FLUSH_LIVES: Final = 32_768
"""Dirty lives that make the store write a new table. A dirty life costs
about 800 bytes in memory (a Life and its seven arrays), so this bounds them
to ~26 MB: at 65,536 a node building a million CRDTs under a 256 MB budget
peaked at 388 MB, past the 1.5x the budget it may use. Writing a table costs
about 1 us per row kept from the old one (the rows are copied as they are)
and 5 us per dirty row: at a million CRDTs ~1.2 s of the index thread per
32,768 changed CRDTs."""

CACHED_LIVES: Final = 16_384
"""Clean lives kept in memory (least recently used first out): ~10 MB. A
life read back from the table costs one block read, ~15-30 us."""

PENDING_SIZES: Final = 65_536
"""Sizes noted for CRDTs whose first record is not indexed yet, at most
(the oldest are forgotten: such a CRDT is measured again)."""


def encode_row(life: Life, held: tuple[int, int] | None = None) -> bytes:
    """The table row of ``life``: its first ``held`` ops and checkpoints
    (None: all). The loop may append to the life while this runs in the I/O
    thread: every column is cut to the shortest, a prefix of ops that all
    columns hold (appends go in column order), and to ``held``, what the
    life held when the table's plan was taken (``KeyDir.flush_plan``)."""
    n = min(len(life.seqs), len(life.ts), len(life.pos), len(life.writers), len(life.tags))
    m = min(len(life.cp_seqs), len(life.cp_pos))
    if held is not None:
        n, m = min(n, held[0]), min(m, held[1])
    return msgpack.packb(  # type: ignore[no-any-return]
        [
            life.epoch,
            life.from_start,
            life.since_checkpoint,
            life.checkpoint_due_at,
            column_bytes(life.seqs[:n]),
            column_bytes(life.ts[:n]),
            column_bytes(life.pos[:n]),
            column_bytes(life.cp_seqs[:m]),
            column_bytes(life.cp_pos[:m]),
            column_bytes(life.writers[:n]),
            column_bytes(life.tags[:n]),
        ],
        use_bin_type=True,
    )


def peek_row(entry: Entry) -> tuple[str, int, bool]:
    """A row's epoch, latest seq and whether its state can be rebuilt (it
    starts at seq 1 or holds a checkpoint), without building its life."""
    epoch, from_start, _, _, seqs, _, _, cps, _, _, _ = msgpack.unpackb(entry[0], raw=False)
    last = seqs[-8:] if seqs else cps[-8:]
    latest = int.from_bytes(last, "little", signed=True) if last else 0
    return epoch, latest, bool(from_start) or bool(cps)


def decode_row(entry: Entry) -> Life:
    data, type_name, size = entry
    row = msgpack.unpackb(data, raw=False)
    (epoch, from_start, since, due, seqs, ts, pos, cps, cpp, writers, tags) = row
    life = Life(epoch)
    life.type_name = type_name
    life.from_start = bool(from_start)
    life.since_checkpoint = since
    life.checkpoint_due_at = due
    life.seqs, life.ts, life.pos = column(seqs), column(ts), column(pos)
    life.writers, life.tags = column(writers), column(tags)
    life.cp_seqs, life.cp_pos = column(cps), column(cpp)
    life.size = size
    if not len(life.seqs) == len(life.ts) == len(life.pos) == len(life.writers):
        raise ValueError("a row whose op columns differ in length")
    return life


IDS_BLOCK: Final = 512
"""Ids in one block of a :class:`SortedIds` (a block splits at twice this and
joins its neighbour under half): an add or a discard moves at most ~8 KB of
pointers. At the overlay's ~49,000 ids either costs ~1 us (a set's: ~0.07
us), where one sorted list moved ~200 KB, ~5 us, on every row read back and
every one let go (perf/studies/keydir_listing.py)."""


class SortedIds:
    """A set of ids kept sorted, for listing after a cursor: adding or
    discarding one costs O(log n + IDS_BLOCK), and the ids after a cursor
    come in order from there (a list of sorted blocks and each block's last
    id, as sortedcontainers' SortedList)."""

    __slots__ = ("_blocks", "_lasts")

    def __init__(self) -> None:
        self._blocks: list[list[str]] = []
        self._lasts: list[str] = []

    def __len__(self) -> int:
        return sum(len(b) for b in self._blocks)

    def __bool__(self) -> bool:
        return bool(self._blocks)

    def add(self, crdt_id: str) -> None:
        """Add ``crdt_id`` (the caller knows it is not held: the overlay's
        dict of lives says so)."""
        blocks, lasts = self._blocks, self._lasts
        if not blocks:
            blocks.append([crdt_id])
            lasts.append(crdt_id)
            return
        i = bisect_left(lasts, crdt_id)
        if i == len(blocks):
            i -= 1
            blocks[i].append(crdt_id)
            lasts[i] = crdt_id
        else:
            insort(blocks[i], crdt_id)
        if len(blocks[i]) > 2 * IDS_BLOCK:
            block = blocks[i]
            blocks[i : i + 1] = [block[:IDS_BLOCK], block[IDS_BLOCK:]]
            lasts[i : i + 1] = [block[IDS_BLOCK - 1], block[-1]]

    def discard(self, crdt_id: str) -> None:
        blocks, lasts = self._blocks, self._lasts
        i = bisect_left(lasts, crdt_id)
        if i == len(blocks):
            return
        block = blocks[i]
        j = bisect_left(block, crdt_id)
        if block[j] != crdt_id:
            return
        del block[j]
        if not block:
            del blocks[i], lasts[i]
            return
        lasts[i] = block[-1]
        if len(block) < IDS_BLOCK // 2 and len(blocks) > 1:
            # Join a neighbour, so that blocks stay few whatever leaves.
            k = i if i + 1 < len(blocks) else i - 1
            blocks[k : k + 2] = [blocks[k] + blocks[k + 1]]
            lasts[k : k + 2] = [lasts[k + 1]]
            if len(blocks[k]) > 2 * IDS_BLOCK:
                block = blocks[k]
                half = len(block) // 2
                blocks[k : k + 1] = [block[:half], block[half:]]
                lasts[k : k + 1] = [block[half - 1], block[-1]]

    def after(self, start: str, inclusive: bool) -> Iterator[str]:
        """The ids from ``start`` (past it unless ``inclusive``) in order. The
        set must not change while this is read."""
        blocks = self._blocks
        i = bisect_left(self._lasts, start)
        if i == len(blocks):
            return
        block = blocks[i]
        j = bisect_left(block, start) if inclusive else bisect_right(block, start)
        for k in range(j, len(block)):
            yield block[k]
        for block in blocks[i + 1 :]:
            yield from block


@dataclass
class Flush:
    """What a new table is made of: the current table and the lives that
    changed (None: deleted)."""

    table: Table | None
    changed: list[tuple[Key, Life | None]]
    header: Header
    held: dict[Key, tuple[int, int]] = field(default_factory=dict)
    """Each changed life's ops and checkpoints when the plan was taken: the
    frames of those the loop appends later lie past ``header.end``, where a
    start reads them again. Before the history files are synced, they may
    be lost with the machine (a row naming them would point at bytes the
    log then appends again elsewhere, or at nothing)."""


class KeyDir(HistoryIndex):
    """The history index of the embedded store, over its table (see the
    module docstring), and its catalogue: every live CRDT's type and size."""

    def __init__(self, flush_lives: int = FLUSH_LIVES, cached_lives: int = CACHED_LIVES) -> None:
        super().__init__()
        if flush_lives < 1 or cached_lives < 1:
            # A life read back from the table goes into the clean cache and
            # is changed there by the caller (add_op, add_checkpoint, ...):
            # with no room it was evicted at once, the change was lost, and
            # the next flush deleted the key's row.
            raise ValueError("flush_lives and cached_lives must be positive")
        self.flush_lives = flush_lives
        self.cached_lives = cached_lives
        self.table: Table | None = None
        self._dirty: set[Key] = set()
        self._flushing: set[Key] = set()
        self._clean: OrderedDict[Key, None] = OrderedDict()
        """Clean lives in use order, the least recent first (an OrderedDict:
        taking the oldest of a plain dict that keeps losing its first keys
        scans the dead slots before it, O(n) each)."""
        self._gone: set[Key] = set()
        self._by_ns: dict[str, SortedIds] = {}
        """The ids of the overlay's lives, per namespace, sorted (for
        listings): exactly the keys of ``_lives``."""
        self._usage: dict[str, list[int]] = {}
        self.board = UsageBoard()
        """``_usage`` summed over the namespaces that hold a live CRDT, and
        the largest (for metrics)."""
        self._pending_sizes: dict[Key, int] = {}
        self._unmeasured_round: list[Key] | None = None
        """The overlay's unmeasured keys, sorted, as they were when the current
        round of :meth:`unmeasured` began (None: none began); handed out from
        ``_unmeasured_at``, then the table's from after ``_unmeasured_from``."""
        self._unmeasured_in_round: frozenset[Key] = frozenset()
        self._unmeasured_at = 0
        self._unmeasured_from: Key | None = None
        self._compaction: tuple[Retention, int, dict[int, int]] | None = None
        """While a compaction runs: what it trims by, and the positions it
        moved, applied to every life read back from the old table."""
        self.reads = 0
        """Rows read back from the table."""
        self.on_flush_due: Callable[[], None] | None = None
        """Called when sizes noted outside a write make a table due (the
        store's writes check :attr:`flush_due` themselves)."""

    def attach(self, table: Table) -> None:
        """Start from ``table`` (at open, before anything is indexed)."""
        self.table = table
        self._usage = {ns: list(u) for ns, u in table.header.usage.items()}
        self.board.load(table.header.usage.items())

    def close(self) -> None:
        if self.table is not None:
            self.table.close()
            self.table = None

    def __len__(self) -> int:
        """Lives in memory (the overlay)."""
        return len(self._lives)

    @property
    def dirty(self) -> int:
        return len(self._dirty)

    @property
    def flush_due(self) -> bool:
        return len(self._dirty) >= self.flush_lives and not self._flushing

    # -- the overlay (HistoryIndex's hooks) -----------------------------------

    def _find(self, key: Key) -> Life | None:
        life = self._lives.get(key)
        if life is not None:
            if key in self._clean:
                self._clean.move_to_end(key)
            return life
        if self.table is None or key in self._gone:
            return None
        entry = self.table.get(key)
        if entry is None:
            return None
        life = decode_row(entry)
        self.reads += 1
        if self._compaction is not None:
            # Read from the table being rewritten: as the rewrite will hold it.
            retention, now_ms, moved = self._compaction
            trim_life(life, retention, now_ms)
            if moved:
                relocate_life(life, moved)
        self._enter(key, life)
        self._clean[key] = None
        if len(self._clean) > self.cached_lives:
            self._shrink()
        return life

    def _put(self, key: Key, life: Life) -> None:
        self._enter(key, life)
        self._clean.pop(key, None)
        self._gone.discard(key)
        self._dirty.add(key)

    def _forget(self, key: Key) -> None:
        life = self._find(key)
        self._pending_sizes.pop(key, None)
        if life is None:
            return
        self._account(key[0], life, -1)
        if self._lives.pop(key, None) is not None:
            self._leave(key)
        self._clean.pop(key, None)
        if key in self._flushing or (self.table is not None and self.table.get(key) is not None):
            # The table (or the one being written) holds it: a tombstone.
            self._gone.add(key)
            self._dirty.add(key)
        else:
            self._dirty.discard(key)

    def _changed(self, key: Key) -> None:
        if key in self._clean:
            del self._clean[key]
        self._dirty.add(key)

    def _enter(self, key: Key, life: Life) -> None:
        lives = self._lives
        if key not in lives:
            ids = self._by_ns.get(key[0])
            if ids is None:
                ids = self._by_ns[key[0]] = SortedIds()
            ids.add(key[1])
        lives[key] = life

    def _shrink(self) -> None:
        clean = self._clean
        lives = self._lives
        while len(clean) > self.cached_lives:
            key = clean.popitem(last=False)[0]
            del lives[key]
            self._leave(key)

    def _leave(self, key: Key) -> None:
        """``key``'s life left memory: its id leaves the sorted ids, and a
        namespace left with none drops them (a node serving many namespaces
        in turn kept an empty entry for each it ever served)."""
        ids = self._by_ns.get(key[0])
        if ids is not None:
            ids.discard(key[1])
            if not ids:
                del self._by_ns[key[0]]

    def holds(self, ns: str, crdt_id: str, epoch: str, seq: int) -> bool:
        """:meth:`HistoryIndex.holds`, answered from the table's row without
        making the life resident when it is not (an eviction asks this of
        every CRDT it lets go)."""
        key = (ns, crdt_id)
        if (
            key in self._lives
            or self.table is None
            or key in self._gone
            or self._compaction is not None
        ):
            return super().holds(ns, crdt_id, epoch, seq)
        entry = self.table.get(key)
        if entry is None:
            return False
        held_epoch, latest, rebuildable = peek_row(entry)
        return held_epoch == epoch and latest == seq and rebuildable

    # -- the catalogue: types, sizes, usage, listings --------------------------

    def _account(self, ns: str, life: Life, sign: int) -> None:
        """``life`` counts (``sign`` 1) or no longer counts (-1) in ``ns``'s
        usage, and in the board's totals; the namespace is ranked again at
        the next scrape (a set.add: see :class:`UsageBoard`)."""
        if life.type_name is None:
            return
        u = self._usage.get(ns)
        if u is None:
            u = self._usage[ns] = [0, 0, 0]
        board = self.board
        crdts = u[0] + sign
        u[0] = crdts
        board.crdts += sign
        if crdts == 0 or (crdts == 1 and sign > 0):
            board.namespaces += sign  # its first live CRDT, or its last gone
        if life.size < 0:
            u[2] += sign
            board.unmeasured += sign
        else:
            u[1] += sign * life.size
            board.bytes += sign * life.size
        board.dirty.add(ns)

    def _resize(self, ns: str, life: Life, size: int) -> None:
        """``life`` is ``size`` bytes now. A measured CRDT growing or
        shrinking (the op path's case) moves its namespace's bytes and the
        board's by the difference: a third of the instructions of taking it
        out and counting it again."""
        u = self._usage.get(ns) if life.type_name is not None else None
        if u is None or life.size < 0 or size < 0:
            self._account(ns, life, -1)
            life.size = size
            self._account(ns, life, 1)
            return
        grown = size - life.size
        life.size = size
        u[1] += grown
        board = self.board
        board.bytes += grown
        board.dirty.add(ns)

    def note_type(self, ns: str, crdt_id: str, type_name: str, size: int = UNMEASURED) -> None:
        """The CRDT's type (``size``: known; else kept, or unmeasured when new)."""
        key = (ns, crdt_id)
        life = self._find(key)
        if life is None:
            return
        pending = self._pending_sizes.pop(key, None) if self._pending_sizes else None
        if size == UNMEASURED and pending is not None:
            size = pending
        if life.type_name == type_name and (size == UNMEASURED or size == life.size):
            return
        self._account(ns, life, -1)
        life.type_name = type_name
        if size != UNMEASURED:
            life.size = size
        self._account(ns, life, 1)
        self._changed(key)

    def note_size(self, ns: str, crdt_id: str, size: int) -> None:
        """The engine's size of a CRDT now."""
        key = (ns, crdt_id)
        if key not in self._lives and self.table is not None and key not in self._gone:
            entry = self.table.get(key)
            if entry is not None and entry[2] == size:
                return  # as the table has it (an eviction measuring a CRDT not changed)
        life = self._find(key)
        if life is None:
            pending = self._pending_sizes
            pending.pop(key, None)
            pending[key] = size
            if len(pending) > PENDING_SIZES:
                del pending[next(iter(pending))]
            return
        if life.size == size:
            return
        self._resize(ns, life, size)
        self._changed(key)
        if self.on_flush_due is not None and self.flush_due:
            self.on_flush_due()

    def unmeasure(self, ns: str, crdt_id: str) -> None:
        """Forget a CRDT's size (records of it were found after the table)."""
        life = self._find((ns, crdt_id))
        if life is not None and life.size != UNMEASURED:
            self._account(ns, life, -1)
            life.size = UNMEASURED
            self._account(ns, life, 1)
            self._changed((ns, crdt_id))

    def size_of(self, ns: str, crdt_id: str) -> int:
        life = self._find((ns, crdt_id))
        if life is not None:
            return life.size
        return self._pending_sizes.get((ns, crdt_id), UNMEASURED)

    def type_of(self, ns: str, crdt_id: str) -> str | None:
        life = self._find((ns, crdt_id))
        return None if life is None else life.type_name

    def usage(self, ns: str) -> Usage:
        u = self._usage.get(ns)
        return Usage() if u is None else Usage(u[0], u[1], u[2])

    def usages(self) -> dict[str, Usage]:
        return {ns: Usage(u[0], u[1], u[2]) for ns, u in self._usage.items() if u[0]}

    def usage_total(self) -> tuple[int, Usage]:
        """How many namespaces hold a CRDT, and their usages summed: O(1)."""
        board = self.board
        return board.namespaces, Usage(board.crdts, board.bytes, board.unmeasured)

    def largest_usages(self, k: int) -> list[tuple[str, Usage]]:
        """The (at most ``k``, at most ``LARGEST_KEPT``) namespaces with the
        most bytes and their usages, largest first (:meth:`UsageBoard.largest`)."""
        names = self.board.largest(k, self._counted_bytes, self._every_counted_bytes)
        return [(ns, self.usage(ns)) for ns in names]

    def _counted_bytes(self, ns: str) -> int | None:
        u = self._usage.get(ns)
        return u[1] if u is not None and u[0] > 0 else None

    def _every_counted_bytes(self) -> Iterator[tuple[str, int]]:
        return ((ns, u[1]) for ns, u in self._usage.items() if u[0] > 0)

    def unmeasured(self, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` live CRDTs without a size, from where the last call
        stopped: a round hands out the overlay's (sorted, as they were when the
        round began), then the table's, each once; at its end the next round
        begins, in the same call (up to the first key this call took). A
        caller that asks again and again (the background measure, which
        passes over CRDTs it cannot read) so does linear work per round:
        without the cursor each call scanned the overlay from its start and
        handed out the same keys first."""
        out: list[Key] = []
        if not any(u[2] for u in self._usage.values()):
            self._unmeasured_round = None  # every size known: no round to keep
            self._unmeasured_in_round = frozenset()
            return out
        if limit < 1:
            return out
        taken: set[Key] = set()
        for _ in range(2):  # the rest of this round, then the next one's start
            if self._hand_out_unmeasured(out, taken, limit):
                break
            self._unmeasured_round = None
        return out

    def _is_unmeasured(self, key: Key) -> bool:
        """Whether ``key`` is a live CRDT without a size: as its life in memory
        says, else as the table's row does (a clean life may have left memory
        since the round began: reading rows back, as measuring does, lets the
        least recently used go)."""
        life = self._lives.get(key)
        if life is not None:
            return life.type_name is not None and life.size == UNMEASURED
        if self.table is None or key in self._gone:
            return False
        row = self.table.get(key)
        return row is not None and row[1] is not None and row[2] == UNMEASURED

    def _hand_out_unmeasured(self, out: list[Key], taken: set[Key], limit: int) -> bool:
        """Add the current round's next unmeasured keys to ``out`` until it
        holds ``limit`` or comes to a key this call took (``taken``): True,
        the cursor after the last key added; False when the round ended."""
        lives = self._lives
        if self._unmeasured_round is None:
            self._unmeasured_round = sorted(
                key
                for key, life in lives.items()
                if life.type_name is not None and life.size == UNMEASURED
            )
            self._unmeasured_in_round = frozenset(self._unmeasured_round)
            self._unmeasured_at = 0
            self._unmeasured_from = None
        in_round = self._unmeasured_round
        while self._unmeasured_at < len(in_round):
            key = in_round[self._unmeasured_at]
            if self._is_unmeasured(key):
                if key in taken:
                    return True
                out.append(key)
                taken.add(key)
            self._unmeasured_at += 1
            if len(out) == limit:
                return True
        if self.table is None:
            return False
        after = self._unmeasured_from
        handed = self._unmeasured_in_round
        for key, (_, type_name, size) in self.table.scan(after):
            if key == after or key in handed or key in self._gone:
                continue  # scan() starts at ``after`` itself; the overlay's went first
            life = lives.get(key)
            if life is not None:  # in memory since the round began: as it is now
                type_name, size = life.type_name, life.size
            if type_name is None or size != UNMEASURED:
                continue
            if key in taken:
                return True
            out.append(key)
            taken.add(key)
            self._unmeasured_from = key
            if len(out) == limit:
                return True
        return False

    def listing(
        self, ns: str, prefix: str, after: str | None, limit: int
    ) -> list[tuple[str, str, int]]:
        """Up to ``limit`` (at most :data:`MAX_SCAN`) live CRDTs of ``ns`` with
        ``prefix``, after ``after``, in id order: id, type and latest seq."""
        limit = min(limit, MAX_SCAN)
        start = prefix if after is None or after < prefix else after
        ids = self._by_ns.get(ns)
        overlay = (
            iter(())
            if ids is None
            else takewhile(lambda i: i.startswith(prefix), ids.after(start, start != after))
        )
        out: list[tuple[str, str, int]] = []
        lives = self._lives
        for crdt_id in heapq.merge(overlay, self._table_ids(ns, start, prefix, after)):
            key = (ns, crdt_id)
            life = lives.get(key)
            if life is not None:
                if life.type_name is None or (out and out[-1][0] == crdt_id):
                    continue
                out.append((crdt_id, life.type_name, life.latest))
            elif key not in self._gone and self.table is not None:
                entry = self.table.get(key)
                if entry is None or entry[1] is None:
                    continue
                out.append((crdt_id, entry[1], peek_row(entry)[1]))  # no columns built
            if len(out) == limit:
                break
        return out

    def _table_ids(self, ns: str, start: str, prefix: str, after: str | None) -> Iterator[str]:
        if self.table is None:
            return
        for (n, crdt_id), _ in self.table.scan((ns, start)):
            if n != ns or not crdt_id.startswith(prefix):
                return
            if after is not None and crdt_id <= after:
                continue
            if (ns, crdt_id) in self._lives:
                continue  # listed from the overlay
            yield crdt_id

    # -- writing a table --------------------------------------------------------

    def flush_plan(self, header: Header) -> Flush:
        """What a new table holds (on the loop; ``header``: where the history
        stands now)."""
        self._flushing = self._dirty
        self._dirty = set()
        lives = self._lives
        changed = [(key, lives.get(key)) for key in self._flushing]
        held = {
            key: (len(life.seqs), len(life.cp_seqs)) for key, life in changed if life is not None
        }
        return Flush(self.table, changed, header, held)

    def flushed(self, table: Table) -> None:
        """``table`` (written from the last plan) is in place (on the loop)."""
        old, self.table = self.table, table
        if old is not None:
            old.close()
        for key in self._flushing:
            if key in self._dirty:
                continue
            if key in self._gone:
                self._gone.discard(key)
            elif key in self._lives:
                self._clean[key] = None
        self._flushing = set()
        self._shrink()

    def flush_failed(self) -> None:
        self._dirty |= self._flushing
        self._flushing = set()

    # -- compaction ---------------------------------------------------------------

    def compacting(
        self, retention: Retention | None, now_ms: int = 0, moved: dict[int, int] | None = None
    ) -> None:
        """A compaction trims by ``retention`` at ``now_ms`` and has moved
        ``moved`` (None: it is over)."""
        self._compaction = None if retention is None else (retention, now_ms, moved or {})

    def flushed_compacted(self, table: Table) -> None:
        """The compacted table is in place: the same rows, trimmed and moved,
        as the overlay's clean lives already are."""
        old, self.table = self.table, table
        if old is not None:
            old.close()

    def trim(self, retention: Retention, now_ms: int) -> int:
        """Trim the overlay's lives (the table's are trimmed as it is rewritten)."""
        dropped = 0
        for key, life in list(self._lives.items()):
            n = trim_life(life, retention, now_ms)
            if n:
                dropped += n
                self._changed(key)
        return dropped


def write_table(directory: str, plan: Flush) -> Table:
    """Merge ``plan`` into a new table and put it in place (I/O thread)."""
    changed = sorted(
        ((joined(key), life, plan.held.get(key)) for key, life in plan.changed),
        key=lambda c: c[0],
    )
    writer = TableWriter(directory)
    try:
        old = plan.table.scan_joined() if plan.table is not None else iter(())
        mine = iter(changed)
        theirs = next(old, None)
        ours = next(mine, None)
        while theirs is not None or ours is not None:
            if ours is None or (theirs is not None and theirs[0] < ours[0]):
                assert theirs is not None
                row, type_name, size = theirs[1]
                writer.add_joined(theirs[0], row, type_name, size)
                theirs = next(old, None)
                continue
            text, life, held = ours
            if theirs is not None and theirs[0] == text:
                theirs = next(old, None)  # replaced (or deleted) by ours
            if life is not None:
                writer.add_joined(text, encode_row(life, held), life.type_name, life.size)
            ours = next(mine, None)
        writer.finish(plan.header)
    except BaseException:
        writer.abort()
        raise
    return _reopen(directory, plan.header)


def _reopen(directory: str, header: Header) -> Table:
    table = open_table(directory, header.segments)
    if table is None:
        raise OSError("the table just written cannot be read back")
    return table


def relocate_life(life: Life, moved: dict[int, int]) -> bool:
    """Move ``life``'s positions that ``moved`` names; whether any moved."""
    changed = False
    for arr in (life.pos, life.cp_pos):
        for i, p in enumerate(arr):
            new = moved.get(p)
            if new is not None:
                arr[i] = new
                changed = True
    return changed


def _trimmed(table: Table, retention: Retention, now_ms: int) -> Iterator[Life]:
    for _, entry in table.scan():
        life = decode_row(entry)
        trim_life(life, retention, now_ms)
        yield life


def segment_counts(table: Table, retention: Retention, now_ms: int) -> Counter[int]:
    """How many positions the table's rows still need in each history
    segment once trimmed (I/O thread)."""
    counts: Counter[int] = Counter()
    for life in _trimmed(table, retention, now_ms):
        counts.update(split(p)[0] for p in life.pos)
        counts.update(split(p)[0] for p in life.cp_pos)
    return counts


def positions_in(table: Table, retention: Retention, now_ms: int, wanted: set[int]) -> list[int]:
    """The positions the trimmed rows need in the ``wanted`` segments (I/O thread)."""
    out: list[int] = []
    for life in _trimmed(table, retention, now_ms):
        out.extend(p for p in life.pos if split(p)[0] in wanted)
        out.extend(p for p in life.cp_pos if split(p)[0] in wanted)
    return out


def rewrite_table(
    directory: str,
    table: Table,
    retention: Retention,
    now_ms: int,
    moved: dict[int, int],
    deleted: set[int],
) -> Table:
    """The table with its rows trimmed and moved, without the ``deleted``
    segments (I/O thread). Its ``end`` stays: the frames after it, copies
    included, are read at the next start and found held already."""
    header = table.header
    writer = TableWriter(directory)
    try:
        for text, entry in table.scan_joined():
            life = decode_row(entry)
            changed = trim_life(life, retention, now_ms) > 0
            changed = relocate_life(life, moved) or changed
            writer.add_joined(text, encode_row(life) if changed else entry[0], entry[1], entry[2])
        kept = Header(
            end=header.end,
            last_lsn=header.last_lsn,
            segments={n: c for n, c in header.segments.items() if n not in deleted},
        )
        writer.finish(kept)
    except BaseException:
        writer.abort()
        raise
    return _reopen(directory, kept)


__all__ = [
    "CACHED_LIVES",
    "FLUSH_LIVES",
    "Flush",
    "KeyDir",
    "SortedIds",
    "decode_row",
    "encode_row",
    "positions_in",
    "relocate_life",
    "rewrite_table",
    "segment_counts",
    "write_table",
]
