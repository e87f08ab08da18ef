"""Taking back one writer's ops: ``POST .../revert`` (docs/revert.md).

Theory of operation
-------------------
A revert names a writer (:class:`syncd.history.reads.Writer`: a client id, an
origin, or both) and a span of seqs (``since_seq`` … ``until_seq``; by
default everything retained). It reads the *window*, every retained op
record from ``since_seq`` to the newest durable one, through the store's
history (``Store.history_window``, in one read), marks the writer's ops up
to ``until_seq``, and asks the CRDT's type for the ordinary ops that take
the marked ops' effects back where they are still in effect
(``Crdt.revert_ops``: each type's rule is in docs/revert.md). A type whose
rule reads the *base*, the state right before the window
(``REVERT_BASE``, or a type that raises ``BaseNeeded`` when it needs it
after all: an orset, for an element's form then), gets it unbuilt (``HistoryService.base_at``: a checkpoint
and the deltas after it), so that it builds only what it reads.

Reading a window costs what is decoded of it, so little is: the store
keeps each op's writer and a tag (its origin's and its delta's op name's
keys, and whether it is a revert's: ``syncd.store.base.attribution``) and
hands the records over undecoded (``Retained``). Only the ops that may be
the writer's, and those that may carry an earlier revert's mark, are
decoded here; the type gets a :class:`~syncd.crdt.window.Window`, which
decodes a delta when the type reads it and tells each op's kind before
(an rga reads the marked ops and the others' deletes, a Yjs document every
update, off its encoding). While a revert runs the cyclic garbage collector
is off, and on again in the loop's next step, after the answer
(:func:`_gc_paused`).

The ops are applied as the caller through the one op path: durable before
the answer, and on to subscribers, webhooks and every cluster node like any
write; they merge with what others write meanwhile as CRDT ops do. On a
local store they are staged one at a time in the step that computed them
and made durable in one append (``CrdtService.stage`` and ``persist``, as a
WebSocket read's run of ops is), and the CRDT is measured once after them
as after a batch, once the answer is out; on PostgreSQL they go through
``CrdtService.apply_ops`` as one request, ordered under the CRDT's row lock
and committed in one transaction (all of them or none: a retry with the
same ``op_id`` after a failure applies them all). They carry the origin
:data:`REVERT_ORIGIN` and, in their records, ``reverts``: the writer and
span they took back. A later revert leaves alone the ops an earlier one took
back (whose ``reverts`` covers them and selects them) and, unless it names
an origin, the ops earlier reverts applied: reverting a client twice does
not bring back twice what it deleted, and reverting it does not undo a
revert it made itself. Undo and redo alternate: a redo (a revert naming the
origin :data:`REVERT_ORIGIN`) takes back undos and leaves earlier redos, and
its ops count as the work of the writer whose undos it took back
(:func:`_earlier`), so undoing that writer again takes them back (the
writer's own ops stay taken back by the first undo: the state has them so,
and each type's rule takes back what is in effect). A restore took back every
op after its target seq (its records' ``restores``, syncd/history/restore.py):
a revert leaves those alone too (:func:`_leave_restored`), unless it takes
back the restore's own ops (they are its caller's write: a revert of the
caller takes back the restore and, with it, what the restore took back of
the caller's). With an ``op_id`` the ops carry ``<op_id>/<i>``, and a repeat
answers as the first did. Without one, on a store shared by nodes, they
carry one derived from what they were computed on (:func:`_derived_op_id`),
so that two nodes taking the same revert at once apply it once.

The state the ops are computed on is the one at the window's last seq: the
CRDT in memory when nothing has been applied since the read (the common
case), else the base with the window replayed on it. Ops applied after that
are, to the revert, concurrent edits; but the reverts of one CRDT run one
after the other on this node (:meth:`RevertService._one_at_a_time`), so a
revert sent twice at once takes the ops back once.

Where the retained history does not reach back to ``since_seq``, the answer
is 410 ``history_expired`` (with ``oldest``), as for reads at a seq.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from syncd.crdt.base import OpContext
from syncd.crdt.types import crdt_class
from syncd.crdt.window import BaseNeeded, Window
from syncd.errors import ApiError, bad_request, history_expired, not_found, not_revertible
from syncd.history.reads import Writer
from syncd.history.restore import remember_no_op

if TYPE_CHECKING:
    from syncd.auth.authenticator import Principal
    from syncd.crdt.base import Base, Crdt
    from syncd.crdt.engine import Entry
    from syncd.history.service import HistoryService
    from syncd.service import CrdtService
    from syncd.store.base import Record, Retained, Store

REVERT_ORIGIN: Final = "revert"
"""The origin of the ops a revert applies (``/history?origin=revert`` lists
them; a revert naming it takes them back: a redo)."""

MAX_REVERT_WINDOW: Final = 100_000
"""Ops in a revert's window (``since_seq`` to now), at most: a window is read
into memory whole (as stored, about 160 bytes an op: 16 MB here, and more
for what is decoded of it), and a revert of that many ops takes about a
second. A longer one is 400 ``bad_request`` asking for a later ``since_seq``."""


@dataclass(slots=True)
class _Earlier:
    """An earlier revert in the window: whose ops it took back (its records'
    ``reverts``), where its ops are, and, for a redo, whose work they are."""

    writer: Writer
    since: int
    until: int
    ops: list[int]
    """Its ops, by index in the window (consecutive seqs: a revert's ops are
    applied as one)."""
    redoes: Writer | None = None
    """For a redo (a revert of reverts): the writer whose undos it took back,
    when they were all of one writer. Its ops bring back that writer's work,
    so a later revert of that writer takes them back as the writer's."""

    @property
    def is_redo(self) -> bool:
        return self.writer.origin == REVERT_ORIGIN

    def covers(self, seq: int) -> bool:
        return self.since <= seq <= self.until


def _earlier(held: Retained, maybe: list[int]) -> tuple[list[_Earlier], dict[int, _Earlier]]:
    """The earlier reverts in the window, in order, and the one each revert
    op (by index) belongs to. Only the records that may be theirs are
    decoded (``maybe``: ``held.may_be_reverts()``). Each redo is told whose undos it took back: those in its span
    that it selects and no earlier redo took back already."""
    found: list[_Earlier] = []
    of: dict[int, _Earlier] = {}
    seqs = held.seqs
    for i in maybe:
        mark = held.record(i).get("reverts")
        if mark is None:
            continue
        writer = Writer(mark.get("client_id"), mark.get("origin"))
        since, until = mark["since_seq"], mark["until_seq"]
        last = found[-1] if found else None
        if (
            last is None
            or (last.writer, last.since, last.until) != (writer, since, until)
            or seqs[last.ops[-1]] + 1 != seqs[i]
        ):
            last = _Earlier(writer, since, until, [])
            found.append(last)
        last.ops.append(i)
        of[i] = last
    standing: list[_Earlier] = []
    """The undos so far that no redo took back."""
    for revert in found:
        if revert.is_redo:
            standing = _attribute(revert, standing, held)
        else:
            standing.append(revert)
    return found, of


def _attribute(redo: _Earlier, standing: list[_Earlier], held: Retained) -> list[_Earlier]:
    """Which of the ``standing`` undos ``redo`` took back, and so whose work
    its ops are: one writer's, else nobody's (a redo of several writers'
    undos cannot be split between them). The undos still standing after it."""
    writers: set[Writer] = set()
    left: list[_Earlier] = []
    for undo in standing:
        first = held.record(undo.ops[0])
        if redo.writer.matches(first) and any(redo.covers(held.seqs[i]) for i in undo.ops):
            writers.add(undo.writer)
        else:
            left.append(undo)
    if len(writers) == 1:
        redo.redoes = writers.pop()
    return left


def _counts(writer: Writer, record: Record, earlier: _Earlier | None) -> bool:
    """Whether ``writer`` names ``record``. A revert's op (``earlier``, the
    revert it belongs to) counts as follows: an undo's op for a revert naming
    an origin (``{"client_id": 42, "origin": "revert"}``: a redo), never for
    one by client id alone; a redo's op for a revert of the writer whose
    work it brought back (an undo of it again), never for another redo."""
    if earlier is None:  # not a revert's op (one is always found: may_be_reverts)
        return writer.matches(record) and ("reverts" not in record or writer.origin is not None)
    if earlier.is_redo:
        return writer.origin != REVERT_ORIGIN and earlier.redoes == writer
    return writer.origin is not None and writer.matches(record)


def _taken_back(record: Record, earlier: _Earlier | None, reverts: list[_Earlier]) -> bool:
    """Whether an earlier revert already took ``record`` back (an undo's or a
    redo's: taken back for good, while what a redo brought back is its own
    ops, and an undo of the writer again takes those back)."""
    seq = record["seq"]
    return any(r.covers(seq) and _counts(r.writer, record, earlier) for r in reverts)


@dataclass(slots=True)
class _Restore:
    """A restore in the window: it took back every op after ``to_seq`` up to
    ``until`` (its records' ``restores``), whoever wrote it."""

    to_seq: int
    until: int
    ops: list[int]
    """Its ops, by index in the window (consecutive seqs: a restore's ops are
    applied as one)."""


def _restores(held: Retained, maybe: list[int]) -> list[_Restore]:
    """The restores in the window, in order. Only the records that may be
    theirs are decoded (``maybe``: a restore's op is tagged as a revert's is)."""
    found: list[_Restore] = []
    seqs = held.seqs
    for i in maybe:
        mark = held.record(i).get("restores")
        if mark is None:
            continue
        to_seq, until = mark["to_seq"], mark["until_seq"]
        last = found[-1] if found else None
        if (
            last is None
            or (last.to_seq, last.until) != (to_seq, until)
            or seqs[last.ops[-1]] + 1 != seqs[i]
        ):
            last = _Restore(to_seq, until, [])
            found.append(last)
        last.ops.append(i)
    return found


class _Spans:
    """Disjoint ranges of seqs, in order: what the standing restores took
    back. Sorted, so that a window of many restores is not read over
    quadratically."""

    __slots__ = ("_his", "_los")

    def __init__(self) -> None:
        self._los: list[int] = []
        self._his: list[int] = []

    def covers(self, seq: int) -> bool:
        k = bisect_right(self._los, seq) - 1
        return k >= 0 and seq <= self._his[k]

    def add(self, lo: int, hi: int) -> None:
        """Add ``lo`` … ``hi``, merged with the ranges it overlaps or touches."""
        if lo > hi:
            return
        first = bisect_left(self._his, lo - 1)
        past = bisect_right(self._los, hi + 1)
        if first < past:
            lo, hi = min(lo, self._los[first]), max(hi, self._his[past - 1])
        self._los[first:past] = [lo]
        self._his[first:past] = [hi]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return zip(self._los, self._his, strict=True)


def _undone_by(restore: _Restore, reverts: list[_Earlier], held: Retained) -> _Earlier | None:
    """The earlier undo that took back ``restore``'s ops (a revert of its
    caller) and still stands (no redo took it back), or None."""
    first = held.record(restore.ops[0])
    seq = first["seq"]
    for i, undo in enumerate(reverts):
        if undo.is_redo or not (undo.covers(seq) and _counts(undo.writer, first, None)):
            continue
        undo_first = held.record(undo.ops[0])
        redone = any(
            redo.is_redo
            and redo.writer.matches(undo_first)
            and any(redo.covers(held.seqs[j]) for j in undo.ops)
            for redo in reverts[i + 1 :]
        )
        if not redone:
            return undo
    return None


def _refuse_undone(
    out: list[bool],
    restores: list[_Restore],
    reverts: list[_Earlier],
    held: Retained,
    writer: Writer,
) -> None:
    """Refuse (409) a revert of a writer whose ops lie in the span of a
    restore that an earlier revert undid (docs/revert.md, "After a
    restore"): the undo brought that work back as its own ops, the work of
    no single writer, so this revert cannot take it back, and answering it
    as if the writer had nothing in effect there hid that its work stays.
    Called before :func:`_leave_restored`, on the ops this revert counts."""
    seqs = held.seqs
    for restore in restores:
        if any(out[i] for i in restore.ops):
            continue  # taken back by this revert: not undone by an earlier one
        lo = bisect_left(seqs, restore.to_seq + 1)
        past = bisect_right(seqs, restore.until)
        if not any(out[lo:past]):
            continue
        undo = _undone_by(restore, reverts, held)
        if undo is None:
            continue
        who = " ".join(f"{k} {v!r}" for k, v in writer.body().items())
        undo_seq = seqs[undo.ops[0]]
        caller = held.record(undo.ops[0])["client_id"]
        raise not_revertible(
            f"the ops of {who} from seq {restore.to_seq + 1} to {restore.until} were taken "
            f"back by the restore at seq {seqs[restore.ops[0]]} and brought back by the "
            f"revert at seq {undo_seq} as its own ops, which are no single writer's work; "
            f"to take them back, restore to seq {restore.to_seq} (every op since goes too) "
            f"or take that revert back (client_id {caller}, origin {REVERT_ORIGIN!r}, "
            f"since_seq {undo_seq}, until_seq {seqs[undo.ops[-1]]}); to take back only "
            f"this writer's later ops, pass since_seq {restore.until + 1}"
        )


def _leave_restored(out: list[bool], restores: list[_Restore], seqs: Sequence[int]) -> None:
    """Unmark in ``out`` the ops that a restore took back and that still
    stand taken back: as an earlier revert's, a restore's span is left alone
    (reverting a writer whose work a restore took back takes back nothing of
    it). Except where this revert takes back the restore's own ops (marked in
    ``out``, by a later restore not taken back in turn): they are its
    caller's write, and without them what the restore took back is in effect
    again, to be taken back where it is the writer's (a writer that restored
    its own work away and is reverted ends as if it never wrote). Later
    restores first, since one may take back an earlier one's ops."""
    spans = _Spans()
    for restore in reversed(restores):
        if any(out[i] and not spans.covers(seqs[i]) for i in restore.ops):
            continue  # taken back by this revert: its span no longer stands
        spans.add(restore.to_seq + 1, restore.until)
    for lo, hi in spans:
        first, past = bisect_left(seqs, lo), bisect_right(seqs, hi)
        out[first:past] = [False] * (past - first)


def _marked(writer: Writer, held: Retained, end: int) -> list[bool]:
    """Which ops of the window to take back: ``writer``'s up to ``end`` that
    no earlier revert or standing restore took back, and the ops of the
    redos that brought its work back. Only the ops the store does not know
    to be someone else's, and those that may be a revert's or a restore's,
    are decoded and checked."""
    maybe = held.may_be_reverts()
    reverts, of = _earlier(held, maybe)
    out = [False] * len(held)
    seqs = held.seqs
    candidates = held.may_be_by(writer.client_id, writer.origin)
    redone = [i for r in reverts if r.is_redo and r.redoes == writer for i in r.ops]
    if redone:
        candidates = sorted({*candidates, *redone})
    for i in candidates:
        if seqs[i] > end:
            break
        record = held.record(i)
        earlier = of.get(i)
        out[i] = _counts(writer, record, earlier) and not (
            reverts and _taken_back(record, earlier, reverts)
        )
    restores = _restores(held, maybe)
    if restores:
        if reverts:
            _refuse_undone(out, restores, reverts, held, writer)
        _leave_restored(out, restores, seqs)
    return out


def _derived_op_id(epoch: str, last: int, seqs: Sequence[int], marked: list[bool]) -> str:
    """The op_id of a revert sent without one, on a store shared by nodes:
    what its ops were computed from (the CRDT's life, the window's last seq,
    the seqs it takes back). Two nodes that take the same revert at once
    compute the same ops on the same state, and the second to commit finds
    this id remembered and applies nothing (the engine's op-id check, under
    the CRDT's row lock). A revert computed on any later state (the first's
    ops in it, or the writer's new ops) has another id: it is another revert,
    and applies what it finds still in effect."""
    h = hashlib.blake2b(f"{epoch}:{last}".encode(), digest_size=16)
    h.update(array("q", [seq for seq, m in zip(seqs, marked, strict=True) if m]).tobytes())
    return f"{REVERT_ORIGIN}:{h.hexdigest()}"


def _deltas(held: Retained) -> Callable[[int], Mapping[str, Any]]:
    def load(i: int) -> Mapping[str, Any]:
        delta: Mapping[str, Any] = held.record(i)["op"]
        return delta

    return load


_gc_pauses = 0
"""Reverts running now, or ended in this step of the loop (the loop
interleaves reverts at their awaits)."""


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic collector off while any revert runs. A revert decodes and
    builds tens of thousands of short-lived containers (the base's
    checkpoint, the records it reads, its ops) and frees them all by
    reference counting when it ends; with the collector on they push it
    into a full collection of the whole heap (every resident CRDT), a third
    of a revert's time in perf.studies.revert. Off, they come and go
    unseen; it is on again when the last revert has ended (a revert is
    bounded: :data:`MAX_REVERT_WINDOW`), and what others allocated
    meanwhile is collected as usual then.

    On again in the loop's next step, not as the revert returns: the answer
    goes out in the step the revert returns in, and turned on then, the
    collector would run at the next allocation, before the answer, over
    every container the revert allocated that is still held (the base's
    checkpoint among them: the store's I/O thread holds the last result
    it read until its next call), 3 to 14 ms of an rga revert in
    perf.studies.revert. A step later that collection comes after the
    answer, and the size measure the revert's ops set off (scheduled
    before) runs with the collector still off, without the collections its
    temporaries would set off."""
    global _gc_pauses
    if _gc_pauses == 0:
        if not gc.isenabled():
            yield  # someone else turned it off: leave it so
            return
        gc.disable()
    _gc_pauses += 1
    try:
        yield
    finally:
        asyncio.get_running_loop().call_soon(_gc_resume)


def _gc_resume() -> None:
    """One revert less (:func:`_gc_paused`); the collector on after the last."""
    global _gc_pauses
    _gc_pauses -= 1
    if _gc_pauses == 0:
        gc.enable()


def _applicable(
    entry: Entry, ops: list[dict[str, Any]], client_id: int, now_ms: int
) -> list[dict[str, Any]]:
    """Those of ``ops`` that apply in turn to the CRDT as it is now, tried on
    a copy. The ops of a revert are computed on the state at its window's
    last seq; when ops were applied after that (while the window was read)
    one may no longer apply: a tree's move of a node that another writer
    deleted meanwhile is refused. Staged as they came, the ops before it
    were applied and made durable and the revert answered 400, part of it
    done (and a repeat with its op_id answered a duplicate). A refused op
    meets a concurrent op that wins over it, as it would at a replica: it is
    left out, and the others applied."""
    trial = entry.crdt.clone()
    kept: list[dict[str, Any]] = []
    for op in ops:
        try:
            trial.apply_op(op, OpContext(client_id, now_ms, entry.seq + len(kept) + 1))
        except ApiError:
            continue
        kept.append(op)
    return kept


def _too_long(start: int) -> ApiError:
    return bad_request(
        f"since_seq: the window from seq {start} holds more than "
        f"{MAX_REVERT_WINDOW} ops; revert a shorter span (a later since_seq)"
    )


class RevertService:
    def __init__(self, *, store: Store, service: CrdtService, history: HistoryService) -> None:
        self._store = store
        self._service = service
        self._history = history
        self._running: dict[tuple[str, str], tuple[asyncio.Lock, list[None]]] = {}
        """A lock per CRDT with a revert running or waiting (and who holds or
        waits for it), so that its reverts run one after the other."""

    async def _entry(self, ns: str, crdt_id: str) -> Entry:
        entry = await self._service.ensure(ns, crdt_id)
        if entry is None:
            raise not_found(f"no CRDT {crdt_id!r} in namespace {ns!r}")
        return entry

    async def _same_life(self, ns: str, crdt_id: str, epoch: str) -> Entry:
        entry = await self._entry(ns, crdt_id)
        if entry.epoch != epoch:
            raise not_found(f"{ns}/{crdt_id} was deleted during the revert")
        return entry

    async def type_of(self, ns: str, crdt_id: str) -> str:
        """The CRDT's type (404 when there is none)."""
        return (await self._entry(ns, crdt_id)).type

    async def revert(
        self,
        ns: str,
        crdt_id: str,
        writer: Writer,
        since: int | None,
        until: int | None,
        principal: Principal,
        op_id: str | None,
        source: str,
    ) -> dict[str, Any]:
        """Take back ``writer``'s ops from ``since`` to ``until`` (see the module docstring)."""
        async with self._one_at_a_time(ns, crdt_id):
            with _gc_paused():
                return await self._revert(
                    ns, crdt_id, writer, since, until, principal, op_id, source
                )

    @contextlib.asynccontextmanager
    async def _one_at_a_time(self, ns: str, crdt_id: str) -> AsyncIterator[None]:
        """The reverts of one CRDT one after the other: a revert's window is
        read once the ops before it are durable, so one that starts after
        another has ended finds its ops (and leaves what it took back, or
        answers a duplicate of its op_id). Run at once, the same revert sent
        twice (a client's retry) read its window before the first's ops were
        there, and took the writer's ops back twice."""
        key = (ns, crdt_id)
        held = self._running.get(key)
        if held is None:
            held = self._running[key] = (asyncio.Lock(), [])
        lock, users = held
        users.append(None)
        try:
            async with lock:
                yield
        finally:
            users.pop()
            if not users:
                del self._running[key]

    async def _revert(
        self,
        ns: str,
        crdt_id: str,
        writer: Writer,
        since: int | None,
        until: int | None,
        principal: Principal,
        op_id: str | None,
        source: str,
    ) -> dict[str, Any]:
        entry = await self._entry(ns, crdt_id)
        if not crdt_class(entry.type).REVERTIBLE:
            entry.crdt.revert_ops([], None)  # raises with the type's reason
            raise not_revertible(f"a {entry.type} cannot be reverted")
        if op_id is not None and entry.op_ids.get(f"{op_id}/0") is not None:
            # A repeat: answer the seq of its last op still remembered.
            i, seq = 0, 0
            while (seen := entry.op_ids.get(f"{op_id}/{i}")) is not None:
                i, seq = i + 1, seen[0]
            return {"ok": True, "seq": seq, "duplicate": True}
        if since is not None and since > entry.seq + 1:
            raise bad_request(
                f"since_seq: seq {since} is in the future (the CRDT is at seq {entry.seq})"
            )
        epoch = entry.epoch
        start, held = await self._window(ns, crdt_id, entry, since)
        last = held.seqs[-1] if len(held) else start - 1
        end = last if until is None else min(until, last)
        marked = _marked(writer, held, end)
        matched = sum(marked)
        window = Window(marked, held.kinds(), _deltas(held), held.encodings)
        answer: dict[str, Any] = {
            "ok": True,
            "seq": entry.seq,
            "applied": 0,
            "matched": matched,
            "since_seq": start,
            "until_seq": end,
        }
        if not matched:
            return self._no_op(entry, op_id, answer)
        base = None
        if crdt_class(entry.type).REVERT_BASE:
            base = (await self._history.base_at(ns, crdt_id, start - 1))[1]
        entry = await self._same_life(ns, crdt_id, epoch)
        if entry.seq != last and base is None:
            base = (await self._history.base_at(ns, crdt_id, start - 1))[1]
            entry = await self._same_life(ns, crdt_id, epoch)
        # A large Yjs document's type depths, read in a thread when not known:
        # read by the first op staged, on the event loop, they held every
        # connection for up to a second (CrdtService.ensure_for_write).
        await self._service.ensure_for_write(ns, crdt_id)
        entry = await self._same_life(ns, crdt_id, epoch)
        # No await from here until the ops are staged (a local store) or handed
        # to the op path: the state they are computed on is the one they meet.
        try:
            ops = self._ops(entry.crdt if entry.seq == last else None, window, base)
        except BaseNeeded:
            # A type that reads the base only in rare cases (an orset, for an
            # element's form before the window) asks for it: read it, and
            # compute the ops again on the state they will meet.
            if base is not None:
                raise
            base = (await self._history.base_at(ns, crdt_id, start - 1))[1]
            entry = await self._same_life(ns, crdt_id, epoch)
            ops = self._ops(entry.crdt if entry.seq == last else None, window, base)
        if entry.seq != last and self._service.stages:
            # Computed on the state at the window's end, and met by ops applied
            # since (a tree's node deleted meanwhile): keep the ones that apply.
            ops = _applicable(entry, ops, principal.client_id, self._service.engine.now_ms())
        if not ops:
            answer["seq"] = entry.seq
            return self._no_op(entry, op_id, answer)
        ops = [{**op, "origin": REVERT_ORIGIN} for op in ops]
        if op_id is None and not self._service.stages:
            # Several nodes may take the same revert at once (a client's retry
            # sent to another node): an op_id of what it takes back, so that it
            # is applied once. One node runs a CRDT's reverts one at a time
            # (_one_at_a_time), and each sees the one before it.
            op_id = _derived_op_id(epoch, last, held.seqs, marked)
        if op_id is not None:
            ops = [{**op, "op_id": f"{op_id}/{i}"} for i, op in enumerate(ops)]
        mark = {"reverts": {**writer.body(), "since_seq": start, "until_seq": end}}
        if self._service.stages:
            answer["seq"], answer["applied"] = await self._stage(
                ns, crdt_id, ops, principal, source, mark
            )
            return answer
        # One request, so one commit: on PostgreSQL one transaction, whatever
        # the count (not a client's MAX_BATCH_OPS; as many as the window's
        # marked ops call for, and a window is at most MAX_REVERT_WINDOW). A
        # failure or crash part way leaves none of it, so the same request
        # again, op_id and all, applies it whole instead of answering a
        # repeat of a part.
        result = await self._service.apply_ops(
            ns, crdt_id, ops, principal, source, marks=mark, most=len(ops)
        )
        if result.duplicate and not result.records:
            # Another node applied the same revert first (its op ids met under
            # the CRDT's row lock): answered as a repeat noticed before is.
            return {"ok": True, "seq": result.seq, "duplicate": True}
        answer["applied"], answer["seq"] = result.applied, result.seq
        return answer

    def _no_op(self, entry: Entry, op_id: str | None, answer: dict[str, Any]) -> dict[str, Any]:
        """``answer``, for a revert that applies nothing, once its ``op_id``
        is remembered: a retry is a repeat, not a revert of what the writer
        wrote since (the first was answered for the state it found)."""
        if op_id is not None:
            current = self._service.engine.get(entry.ns, entry.id)
            if current is not None and current.epoch == entry.epoch:
                remember_no_op(self._service.engine, current, op_id, answer["seq"], {})
        return answer

    async def _stage(
        self,
        ns: str,
        crdt_id: str,
        ops: list[dict[str, Any]],
        principal: Principal,
        source: str,
        marks: dict[str, Any],
    ) -> tuple[int, int]:
        """A local store: apply the ops one at a time in this loop step and
        make them durable in one append (as a WebSocket read's run of ops is):
        no copy of the CRDT for a batch, one wait for the disk. Every op's
        permission, and the quotas for the run as one batch, are checked
        before the first is applied; an op refused after that (none should
        be: they were made for this state) leaves
        the ones before it applied, made durable, and raises."""
        service = self._service
        plan = service.engine.plan(ns, crdt_id, ops, most=len(ops))
        service.auth.check_write(principal, crdt_id, plan.type_name, plan.mask)
        quotas = service.quotas
        if quotas.on:
            # The quotas, for the run as one batch, before the first op: each
            # op is checked again as it is staged, and one refused part way
            # (a later insert past SERVICE_MAX_CRDT_BYTES) would leave the ones
            # before it applied and durable, and a repeat of the request
            # answered as a duplicate of a revert never whole.
            usage = service.store.usage_now(ns) if quotas.namespaces_on else None
            quotas.check(plan, usage, principal.client_id)
        records: list[Record] = []
        seq = applied = 0
        try:
            for op in ops:
                result = service.stage(ns, crdt_id, op, principal, marks=marks, measure=False)
                records += result.records
                seq, applied = result.seq, applied + result.applied
        finally:
            try:
                await service.persist(records, source)
            finally:
                # Measured once for the whole run, as a batch is, and after the
                # answer has gone (an encode of the whole state: tens of ms for a
                # long text; the caller answers in the step this returns in).
                service.loop.call_soon(service.engine.measure_if_due, ns, crdt_id)
        return seq, applied

    async def _window(
        self, ns: str, crdt_id: str, entry: Entry, since: int | None
    ) -> tuple[int, Retained]:
        """The first seq of the window and its records, ascending, decoded
        when read: every retained op from ``since`` (default: the oldest
        retained) to the newest durable. 410 when the history does not reach
        back to ``since``, 400 when it holds over :data:`MAX_REVERT_WINDOW`."""
        if since is not None and entry.seq - since + 1 > MAX_REVERT_WINDOW:
            raise _too_long(since)
        # The newest durable op: the history holds the ops in flight only once
        # they are durable (without the wait, a revert racing a write matched
        # nothing). A later op is met as any op after the window is.
        _, epoch, latest = await self._history.durable(ns, crdt_id)
        if epoch != entry.epoch:
            raise not_found(f"{ns}/{crdt_id} was deleted during the revert")
        held, oldest = await self._store.history_window(
            ns, crdt_id, epoch, latest, since, MAX_REVERT_WINDOW + 1
        )
        # Deleted while it was read: its history went with it (404, not an
        # empty window or a 410).
        await self._same_life(ns, crdt_id, entry.epoch)
        start = oldest + 1 if since is None else since
        if start <= oldest:
            raise history_expired(
                f"{ns}/{crdt_id}: the history before seq {oldest + 1} is no longer "
                f"retained (since_seq {start})",
                oldest,
            )
        if len(held) > MAX_REVERT_WINDOW:
            raise _too_long(start)
        seqs = held.seqs
        if seqs and (seqs[0] != start or seqs[-1] - start + 1 != len(seqs)):
            # Trimmed while it was being read: what is left no longer reaches back.
            raise history_expired(
                f"{ns}/{crdt_id}: the history from seq {start} is no longer all retained",
                seqs[0] - 1,
            )
        return start, held

    @staticmethod
    def _ops(now: Crdt | None, window: Window, base: Base | None) -> list[dict[str, Any]]:
        """The type's revert ops, computed on the state at the window's last
        seq: ``now`` when nothing was applied since the window was read, else
        the base with the window replayed on it."""
        if now is None:
            assert base is not None
            now = base.crdt().clone()
            for delta, _ in window:
                now.apply_delta(delta)
        return now.revert_ops(window, base)
