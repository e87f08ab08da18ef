"""Quotas: an op is refused, not the service, when it would pass a limit.

Theory of operation
-------------------
Three limits, each off at 0 (docs/operations.md#quotas):

- ``SERVICE_MAX_CRDT_BYTES``: one CRDT's state. An op that would take it
  past the limit gets 413 ``crdt_too_large``.
- ``SERVICE_NAMESPACE_MAX_CRDTS``: live CRDTs in a namespace. An op that
  would create one more gets 403 ``quota_exceeded``.
- ``SERVICE_NAMESPACE_MAX_BYTES``: the sum of a namespace's CRDT sizes. An
  op that would take it past the limit gets 403 ``quota_exceeded``.

A CRDT's *size* is its state's msgpack encoding, what a snapshot stores
(``engine.state_bytes``). Encoding a state per op would cost more than the
op (5-30 us even for a small one), so the engine measures it when it loads a
CRDT and every ``RESIZE_EVERY_OPS`` ops, and in between this module counts
each op's *growth bound* (``Entry.grown``): its own encoded size plus
:data:`OP_GROWTH_OVERHEAD`, and measures again once that passes a quarter
of the size (4 KiB at least, :data:`REMEASURE_MIN_BYTES`). Ops that only take something away
(:data:`TRIMMING_OPS`) count nothing and are never refused on a CRDT
that exists, so a full CRDT can always be trimmed (on a new id one creates
the CRDT, checked against the namespace's quotas as any creation); a Yjs update that only deletes what the document
holds (no item it lacks) may pass the CRDT limit, or the namespace's bytes, by a
bounded headroom (:data:`DELETION_HEADROOM_DIVISOR`), its growth counted at
:data:`DELETION_RANGE_GROWTH` per range. What a Yjs document holds as
pending (updates waiting for a dependency, which its state leaves out) is
part of its measure (``Engine.resize``), so the store's figures hold it like
any size: while the document is out of memory and after a restart too (it
was noted in memory only, and a restart forgot it). What it holds beyond
its measure (pending since) counts as held, on top of the measure, and in
the namespace's bytes (every document of it that held some after its last
op, and is still in memory unmeasured since, is looked at). The check
adds the op's bound to the size and what was counted since the measure;
when that would pass the CRDT's limit or the namespace's bytes, the CRDT is
measured again first, so an op is refused only on the measured state.

Namespace figures come from the store (``Store.usage``): the count of live
CRDTs and the sum of their sizes as last measured (the engine hands each
measure to ``Store.note_size``), so they lag each CRDT's counted growth
since its measure: the check of an op adds back its own CRDT's, not the
others' (a namespace may pass its bytes by those, docs/operations.md#quotas).

Everything is checked before the engine applies anything, so a refused op
changes nothing: no partial batch, no record, and the connection stays
open. In a cluster the namespace figures of PostgreSQL are refreshed every
``USAGE_REFRESH_S``, so nodes writing at once may pass a namespace quota by
what they write within that time; the CRDT limit is exact (it is checked
under the CRDT's row lock).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

import msgpack

# The growth bound's numbers are the engine's, which counts a replayed op
# the same way (it sits below this module, so it cannot import them from here).
from syncd.crdt.base import OpContext
from syncd.crdt.engine import (
    FIXED_GROWTH,
    OP_GROWTH_OVERHEAD,
    REMEASURE_MIN_BYTES,
    Engine,
    state_bytes,
)
from syncd.crdt.ydoc import YDoc, deletion_ranges
from syncd.errors import ApiError, crdt_too_large, quota_exceeded

if TYPE_CHECKING:
    from syncd.crdt.engine import Entry, Plan
    from syncd.store.base import Store, Usage

log = logging.getLogger("syncd.quotas")

MEASURE_BATCH: Final = 256
"""Unmeasured CRDTs asked of the store at a time by :func:`measure_unmeasured`."""
MEASURE_WARNINGS: Final = 10
"""CRDTs :func:`measure_unmeasured` cannot read that it names in the log, one
line each; any more are counted in one line."""

DEFAULT_MAX_CRDT_BYTES: Final = 64 * 1024 * 1024
"""One CRDT's state, by default: far past any document a person edits (a
novel is about 1 MB of text), and small enough that loading, snapshotting or
sending a CRDT whole stays well under a second."""

TRIMMING_OPS: Final[dict[str, frozenset[str]]] = {
    "rga": frozenset({"delete"}),
    "orset": frozenset({"remove"}),
    "tree": frozenset({"delete"}),
    "presence": frozenset({"leave"}),
}
"""Ops that only take something away: never counted, never refused on a
CRDT that exists (on a new id, the CRDT they create counts in the namespace's
quotas)."""

DELETION_RANGE_GROWTH: Final = 128
"""Bytes one range of a Yjs delete set may add to a document's state: two
split items' headers with the longest ids, and the range in the document's
delete set, base64 in the state (tests/test_quotas.py checks it)."""

DELETION_HEADROOM_DIVISOR: Final = 16
"""A Yjs update that only deletes items the document holds may take it past
``SERVICE_MAX_CRDT_BYTES`` by a sixteenth of it (``REMEASURE_MIN_BYTES`` at
least), its ranges counted at :data:`DELETION_RANGE_GROWTH`: a document at
its limit can be trimmed over Yjs, and never grows past the limit and its
headroom."""

EXACT_GROWTH_MAX_BYTES: Final = 64 * 1024
"""A CRDT of at most this size has an op that its growth bound would refuse
applied to a copy of it, and the copy measured, before the op is refused:
the state decides, so an op that replaces what it writes (a presence
heartbeat, a register's set) passes when what it makes fits. A clone and
an encode of this much cost tens of microseconds, on the refusal path
only; a larger CRDT is refused on the bound (Yjs documents have the
deletion allowance instead)."""

_NOTHING: Final[frozenset[str]] = frozenset()


@dataclass(frozen=True, slots=True)
class Limits:
    max_crdt_bytes: int = DEFAULT_MAX_CRDT_BYTES
    namespace_max_crdts: int = 0
    namespace_max_bytes: int = 0

    @property
    def namespace(self) -> bool:
        return self.namespace_max_crdts > 0 or self.namespace_max_bytes > 0

    @property
    def any(self) -> bool:
        return self.max_crdt_bytes > 0 or self.namespace


class Quotas:
    def __init__(self, limits: Limits, engine: Engine) -> None:
        self.limits = limits
        self.on = limits.any
        """Whether any limit is set (else no op is checked; its growth is
        still counted, :meth:`applied`, for the memory budget's estimate)."""
        self.namespaces_on = limits.namespace
        """Whether a namespace limit is set (``limits.namespace``, read once:
        the limits are frozen)."""
        self._engine = engine
        self._pack = msgpack.Packer(use_bin_type=True, default=repr).pack
        self._waiting: dict[str, dict[str, int]] = {}
        """Per namespace, the Yjs documents that held pending updates beyond
        their measure after their last op here, and how many bytes: in no
        figure of the store yet, so the namespace check adds them
        (:meth:`_waiting_elsewhere`)."""
        self._creating: tuple[str, str, int] | None = None
        """The creation the last :meth:`check` let pass (ns, id, the store's
        count then), for :meth:`applied` to note in :attr:`_step`."""
        self._step: dict[str, tuple[int, set[str]]] = {}
        """Per namespace, the CRDTs created in this loop step and the store's
        count before the first of them. A WebSocket's run of ops (or a
        revert's) is staged op by op and its records appended after the
        last, so the store's figures know none of the run's creations: each
        check counts the larger of the store's count and this one (a
        creation the store counted already is in both), and while the
        store's count shows none of them, their sizes on top of its bytes.
        Forgotten at the next step, when the records are in the store's
        figures."""

    def growth(self, plan: Plan) -> int:
        """The growth bound of ``plan``'s ops (see the module docstring)."""
        type_name = plan.type_name
        fixed = FIXED_GROWTH.get(type_name)
        ops = plan.ops
        if fixed is not None:
            return fixed * len(ops)
        trimming = TRIMMING_OPS.get(type_name, _NOTHING)
        pack = self._pack
        if len(ops) == 1:  # most requests: no loop
            if plan.op_names[0] in trimming:
                return 0
            return len(pack(ops[0])) + OP_GROWTH_OVERHEAD
        total = 0
        for op, name in zip(ops, plan.op_names, strict=True):
            if name not in trimming:
                total += len(pack(op)) + OP_GROWTH_OVERHEAD
        return total

    def check(self, plan: Plan, usage: Usage | None, client_id: int | None = None) -> int:
        """Raise when ``plan`` would pass a limit (nothing is applied yet);
        else its growth bound. ``usage``: the namespace's, when namespace
        quotas are on; ``client_id``: the writer, for an op the bound would
        refuse to be tried on a copy (:data:`EXACT_GROWTH_MAX_BYTES`; None:
        the bound decides)."""
        fixed = FIXED_GROWTH.get(plan.type_name)  # growth()'s first case, without its call
        growth = fixed * len(plan.ops) if fixed is not None else self.growth(plan)
        entry = self._engine.lookup((plan.ns, plan.id))
        if growth == 0 and entry is not None:
            # Only takes away from a CRDT that exists: never refused. On a
            # new id it creates the CRDT (an orset's remove, a presence's
            # leave), which the namespace's quotas count as any creation.
            return 0
        limits = self.limits
        waiting = 0 if entry is None else _pending_bytes(entry)
        held = 0 if entry is None else entry.state_bytes + entry.grown + waiting
        moved = 0  # how far a measure here moved the CRDT's size from what usage holds
        # The sizes of this step's creations, which the store counts nowhere
        # yet (see _step); taken before a measure here moves one of them.
        unwritten = self._unwritten(plan.ns, plan.id, usage) if self._step and usage else 0
        if limits.max_crdt_bytes and held + growth > limits.max_crdt_bytes:
            growth, moved = self._past_crdt_limit(plan, entry, waiting, growth, client_id)
        if usage is None:
            return growth
        creating = entry is None
        if creating and limits.namespace_max_crdts:
            crdts = usage.crdts
            step = self._step.get(plan.ns)
            if step is not None:
                crdts = max(crdts, step[0] + len(step[1]))
            if crdts + 1 > limits.namespace_max_crdts:
                raise quota_exceeded(
                    f"namespace {plan.ns!r} holds {crdts} CRDTs: "
                    f"SERVICE_NAMESPACE_MAX_CRDTS is {limits.namespace_max_crdts}"
                )
        if limits.namespace_max_bytes:
            used = usage.bytes + unwritten + moved + self._waiting_elsewhere(plan.ns, plan.id)
            growth = self._check_namespace(plan, entry, waiting, growth, used, client_id)
        self._creating = (plan.ns, plan.id, usage.crdts) if creating else None
        return growth

    def _past_crdt_limit(
        self, plan: Plan, entry: Entry | None, waiting: int, growth: int, client_id: int | None
    ) -> tuple[int, int]:
        """An op whose bound passes ``SERVICE_MAX_CRDT_BYTES`` on the size
        counted: the growth bound to count (a deletion's may be more than the
        op's) and how far a measure moved the size, or refused."""
        limit = self.limits.max_crdt_bytes
        held = 0 if entry is None else entry.state_bytes + entry.grown + waiting
        moved = 0
        if entry is not None and (entry.grown or entry.unsized_ops):
            moved = self._measure(entry)  # refuse on the measured state only
            held = entry.state_bytes + waiting
            if held + growth <= limit:
                return growth, moved
        growth = self._least_growth(plan, entry, growth, client_id)
        if held + growth <= limit:
            return growth, moved
        deleting = self._deletion_growth(plan, entry, limit + _headroom(limit) - held)
        if deleting is None:
            raise crdt_too_large(
                f"{plan.id!r} holds {held} bytes; this op would take it past "
                f"SERVICE_MAX_CRDT_BYTES ({limit})"
            )
        return max(growth, deleting), moved

    def _check_namespace(
        self,
        plan: Plan,
        entry: Entry | None,
        waiting: int,
        growth: int,
        used: int,
        client_id: int | None,
    ) -> int:
        """``SERVICE_NAMESPACE_MAX_BYTES``, the namespace holding ``used``
        bytes as measured: the growth bound to count. As for the CRDT limit,
        an op is refused on the measured state only, and a Yjs update that
        only deletes what the document holds passes within the headroom: a
        full namespace can trim its documents over Yjs."""
        limit = self.limits.namespace_max_bytes
        counted = 0 if entry is None else entry.grown
        if used + counted + waiting + growth <= limit:
            return growth
        if entry is not None and (entry.grown or entry.unsized_ops):
            used = max(0, used + self._measure(entry))
            counted = 0
        held = used + counted + waiting
        growth = self._least_growth(plan, entry, growth, client_id)
        if held + growth <= limit:
            return growth
        deleting = self._deletion_growth(plan, entry, limit + _headroom(limit) - held)
        if deleting is None:
            raise quota_exceeded(
                f"namespace {plan.ns!r} holds {held} bytes; this op would "
                f"take it past SERVICE_NAMESPACE_MAX_BYTES ({limit})"
            )
        return max(growth, deleting)

    def _least_growth(
        self, plan: Plan, entry: Entry | None, growth: int, client_id: int | None
    ) -> int:
        """Before a refusal: the least growth ``plan`` can be counted at on
        the CRDT as it is. The ops that repeat an ``op_id`` (one the CRDT
        remembers, or an earlier op's of the plan) apply nothing and are
        answered as the first time (docs/data-model.md#op-ids), so the retry
        of an op that filled its CRDT or namespace is not refused; and on a
        CRDT of at most :data:`EXACT_GROWTH_MAX_BYTES` the others are applied
        to a copy, whose growth is measured. The op path pays nothing for it."""
        if entry is None:
            return growth
        known = entry.op_ids.get
        seen: set[str] = set()
        fresh: list[int] = []
        for i, op in enumerate(plan.ops):
            op_id = op.get("op_id")
            if op_id is None:
                fresh.append(i)
            elif op_id not in seen:
                seen.add(op_id)
                if known(op_id) is None:
                    fresh.append(i)
        if len(fresh) < len(plan.ops):
            plan = replace(
                plan,
                ops=[plan.ops[i] for i in fresh],
                op_names=[plan.op_names[i] for i in fresh],
            )
            growth = self.growth(plan)
        if growth and client_id is not None:
            growth = min(growth, self._growth_on_a_copy(plan, entry, client_id))
        return growth

    def _growth_on_a_copy(self, plan: Plan, entry: Entry, client_id: int) -> int:
        """How much ``plan``'s ops grow a copy of ``entry``'s CRDT, written by
        ``client_id`` now; infinite for a CRDT past
        :data:`EXACT_GROWTH_MAX_BYTES`, a Yjs document, or ops the CRDT
        refuses (the apply then refuses them with its own message)."""
        crdt = entry.crdt
        if isinstance(crdt, YDoc) or entry.state_bytes > EXACT_GROWTH_MAX_BYTES:
            return _UNKNOWN
        before = state_bytes(crdt.state())
        if before > EXACT_GROWTH_MAX_BYTES:  # grown past it since its measure
            return _UNKNOWN
        copy = crdt.clone()
        now = self._engine.now_ms()
        try:
            for i, op in enumerate(plan.ops, start=entry.seq + 1):
                copy.apply_op(op, OpContext(client_id, now, i))
        except ApiError:
            return _UNKNOWN
        return max(0, state_bytes(copy.state()) - before)

    def _measure(self, entry: Entry) -> int:
        """Measure ``entry`` again; how far its size moved."""
        was = entry.state_bytes
        self._engine.resize(entry)
        return entry.state_bytes - was

    def _deletion_growth(self, plan: Plan, entry: Entry | None, room: int) -> int | None:
        """A Yjs plan past a limit whose updates only delete what the
        document holds: their growth bound when it fits in ``room`` (what the
        limit and its headroom, :func:`_headroom`, leave), else None
        (refused). Deleting inside an item splits it: a document can grow by
        deleting (every other character of one long insertion: 14 times its
        size), so the bound counts :data:`DELETION_RANGE_GROWTH` per range,
        and the headroom is what a document, or a namespace, at its limit may
        pass it by to be trimmed."""
        if plan.type_name != YDoc.TYPE or entry is None or not isinstance(entry.crdt, YDoc):
            return None
        most = room // DELETION_RANGE_GROWTH
        state_vector = entry.crdt.state_vector()
        ranges = 0
        for op in plan.ops:
            found = deletion_ranges(op.get("update"), state_vector, most - ranges)
            if found is None:
                return None
            ranges += found
        return ranges * DELETION_RANGE_GROWTH

    def applied(self, plan: Plan, growth: int) -> None:
        """Count ``growth`` on the CRDT just applied, and measure it once what
        was counted since its last measure passes a quarter of its size (and
        :data:`REMEASURE_MIN_BYTES`): a namespace's bytes then lag by less than that
        per CRDT, and measuring (an encode of the state) costs about one encode
        per quarter of growth."""
        entry = self._engine.lookup((plan.ns, plan.id))
        creating = self._creating
        if creating is not None:
            self._creating = None
            if entry is not None and creating[0] == plan.ns and creating[1] == plan.id:
                self._note_created(creating)
        if entry is None:
            return  # gone
        if entry.unsized_ops:  # (else measured by this very apply)
            grown = entry.grown = entry.grown + growth
            if grown > REMEASURE_MIN_BYTES and grown > entry.state_bytes >> 2:
                self._engine.resize(entry)
        if self.namespaces_on and isinstance(entry.crdt, YDoc):
            self._note_waiting(plan.ns, plan.id, _pending_bytes(entry))

    def _unwritten(self, ns: str, crdt_id: str, usage: Usage) -> int:
        """The sizes of the CRDTs created in ``ns`` in this step while the
        store's count shows none of them yet (a run staged before its append);
        ``crdt_id``'s growth since its measure is left to its own check."""
        step = self._step.get(ns)
        if step is None or usage.crdts >= step[0] + len(step[1]):
            return 0
        lookup = self._engine.lookup
        total = 0
        for created in step[1]:
            entry = lookup((ns, created))
            if entry is not None:
                total += entry.state_bytes + (0 if created == crdt_id else entry.grown)
        return total

    def _note_created(self, creating: tuple[str, str, int]) -> None:
        """Count a creation just applied in this step's (see :attr:`_step`)."""
        ns, crdt_id, counted = creating
        steps = self._step
        step = steps.get(ns)
        if step is None:
            if not steps:
                try:
                    asyncio.get_running_loop().call_soon(steps.clear)
                except RuntimeError:  # no loop (a check outside the server): nothing to count
                    return
            step = steps[ns] = (counted, set())
        step[1].add(crdt_id)

    def forget(self, ns: str, crdt_id: str) -> None:
        """A CRDT deleted: what it held as pending is gone with it."""
        if self._waiting:
            self._note_waiting(ns, crdt_id, 0)

    def _note_waiting(self, ns: str, crdt_id: str, held: int) -> None:
        """Keep what a Yjs document holds as pending beyond its measure after
        an op (nothing: forget it)."""
        docs = self._waiting.get(ns)
        if held:
            if docs is None:
                docs = self._waiting[ns] = {}
            docs[crdt_id] = held
        elif docs is not None and docs.pop(crdt_id, None) is not None and not docs:
            del self._waiting[ns]

    def _waiting_elsewhere(self, ns: str, crdt_id: str) -> int:
        """What the namespace's other Yjs documents hold as pending beyond
        their measure now: read off each one noted in memory (it may have
        integrated, or been measured, since: it holds nothing beyond then,
        and is forgotten). One that left memory was measured as it left
        (``Residency.candidates``): the store's figures hold it, and it is
        forgotten; a deleted one is forgotten by :meth:`forget`. No document
        of the namespace holds any, nearly always: one lookup."""
        docs = self._waiting.get(ns)
        if not docs:
            return 0
        total = 0
        for other in list(docs):
            if other == crdt_id:
                continue  # its check counts its own
            entry = self._engine.lookup((ns, other))
            held = 0 if entry is None else _pending_bytes(entry)
            if held:
                docs[other] = held
                total += held
            else:
                del docs[other]
        if not docs:
            del self._waiting[ns]
        return total


_UNKNOWN: Final = 1 << 62
"""What :meth:`Quotas._growth_on_a_copy` answers when it cannot say."""


def _headroom(limit: int) -> int:
    """What a Yjs deletion may take a document or a namespace past its
    ``limit`` by (:data:`DELETION_HEADROOM_DIVISOR`)."""
    return max(limit // DELETION_HEADROOM_DIVISOR, REMEASURE_MIN_BYTES)


def _pending_bytes(entry: Entry) -> int:
    """What a Yjs document holds as pending (updates waiting for their
    dependencies) beyond what its last measure held (``Entry.pending_bytes``):
    counted as held, or updates that never integrate would grow a document
    past every limit."""
    crdt = entry.crdt
    return max(0, crdt.pending_bytes() - entry.pending_bytes) if isinstance(crdt, YDoc) else 0


async def measure_unmeasured(store: Store, engine: Engine) -> int:
    """Measure every CRDT whose size the store does not know (written after the
    last hint, before a crash), reading it from the store without making it
    resident; the CRDTs measured. Runs in the background after a start.

    Every CRDT tried costs one loop step, those that cannot be read included
    (a store full of damaged CRDTs would otherwise hold the loop for seconds:
    no request answered, no signal handled); the first
    :data:`MEASURE_WARNINGS` of those are named in the log, the rest counted
    in one line at the end."""
    measured = 0
    failed = 0
    tried: set[tuple[str, str]] = set()
    while True:
        # The store hands out successive batches and wraps around
        # (Store.unmeasured): a key tried already says every one still
        # unmeasured was tried (those it cannot read stay unmeasured).
        found = store.unmeasured(MEASURE_BATCH)
        batch = [key for key in found if key not in tried]
        tried.update(batch)
        for ns, crdt_id in batch:
            await asyncio.sleep(0)  # one CRDT per loop step: requests go first
            entry = engine.get(ns, crdt_id)
            if entry is None:
                try:
                    loaded = await store.load(ns, crdt_id)
                    entry = engine.get(ns, crdt_id)  # an op may have loaded it meanwhile
                    if entry is None and loaded is not None:
                        entry = Engine().load(ns, crdt_id, *loaded)  # a throwaway engine
                except Exception as exc:  # a damaged copy: its reads say so too
                    failed += 1
                    if failed <= MEASURE_WARNINGS:
                        log.warning("%s/%s: cannot measure its size: %s", ns, crdt_id, exc)
                    entry = None
            if entry is None:
                continue
            store.note_size(ns, crdt_id, entry.state_bytes)
            measured += 1
        if len(batch) < len(found) or not found:
            break
    if failed > MEASURE_WARNINGS:
        log.warning(
            "%d CRDTs could not be measured (the first %d are named above)",
            failed,
            MEASURE_WARNINGS,
        )
    return measured


__all__ = [
    "DEFAULT_MAX_CRDT_BYTES",
    "FIXED_GROWTH",
    "OP_GROWTH_OVERHEAD",
    "REMEASURE_MIN_BYTES",
    "TRIMMING_OPS",
    "Limits",
    "Quotas",
    "measure_unmeasured",
]
