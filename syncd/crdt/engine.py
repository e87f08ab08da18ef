"""The engine: every live CRDT in memory, by ``(namespace, id)``.

Pure and synchronous: it validates and applies ops, numbers them (``seq``),
remembers recent ``op_id``s, and hands back *records* for the store to persist
and the hub to broadcast. It does no I/O and never awaits, so a caller that
plans, checks permissions and applies without awaiting in between sees a
consistent CRDT.

Writing an op is two steps, so the auth layer can check the op mask between:

    plan = engine.plan(ns, crdt_id, body)      # shapes and type, nothing applied
    result = engine.apply(plan, client_id)     # all or none

Attribution: a record names its writer (``client_id``, the token's) and,
when the op carried one, its ``origin`` (a short string such as
``agent:summarize-42``: which task of that writer made it). A record
without an origin has no ``origin`` key at all, so attribution costs an
op that does not use it nothing in the stores. ``/history`` shows both and
filters by them; a revert (syncd/revert.py) takes back the ops they select.

Lives and epochs: a CRDT comes into being with its first successful op and
gets a fresh random ``epoch``; ``delete`` ends the life, and the next op
starts a new one (new epoch, seq from 1), so a subscriber never mixes two lives.

Residency: the engine is a cache over the store. It holds the CRDTs in use
(``resident``), least recently used first, and an estimate of the memory each
takes (:func:`estimate_bytes`, summed in ``resident_bytes``); :meth:`Engine.load`
brings one in from what the store holds and :meth:`Engine.drop` lets one go
(no record: the store still has it). Which CRDTs may go, and when, is the
caller's policy (``syncd/residency.py``); the engine only keeps the order and
the sums.

Replaying records (recovery, other cluster nodes): records must arrive in
store order. An op record of the live epoch applies when its seq is the next
one, is ignored when already applied, and raises :class:`GapError` when seqs
are missing. An op record of another epoch can only start a new life, which
begins at seq 1: at seq 1 it replaces the held life (the delete that ended the
old one was missed); at a higher seq it raises :class:`GapError` with
``have=0`` so the caller fetches that life from its start.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack

from syncd.crdt.base import Crdt, OpContext
from syncd.crdt.clock import HybridClock, wall_clock_ms
from syncd.crdt.opids import OP_ID_TTL_MS, OpIdMemory
from syncd.crdt.rga import Rga
from syncd.crdt.types import PREFIXES, TYPES, crdt_class, mask_bit, type_for_id
from syncd.crdt.validate import check_origin
from syncd.crdt.ydoc import YDoc
from syncd.errors import (
    ApiError,
    bad_request,
    forbidden,
    invalid_op,
    type_mismatch,
    unknown_type,
)

MAX_BATCH_OPS = 1000
"""Ops in one request (docs/data-model.md#ops)."""

OP_ID_MAX_LEN = 128
"""Characters in an ``op_id`` (docs/data-model.md#op-ids)."""

OP_ID_WINDOW = 1024
"""How many of its most recent ``op_id``s each CRDT remembers at least
(``SERVICE_OP_ID_WINDOW``), whatever their age; ids younger than the TTL
(``SERVICE_OP_ID_TTL_S``, ``opids.OP_ID_TTL_MS``) are remembered too. A quiet
CRDT answers a retry after hours; a busy one for at least the TTL."""

MAX_LIST_LIMIT = 1000
"""Largest page of a listing (``?limit`` ≤ 1000, docs/http-api.md#listing-crdts)."""

ENTRY_BASE_BYTES: Final = 800
"""Memory of an entry beyond its state (the Entry, its Crdt object, dict slots)."""

STATE_BYTE_FACTORS: Final = {
    "gcounter": 60,
    "pncounter": 70,
    "lwwregister": 15,
    "orset": 40,
    "presence": 30,
    "tree": 25,
    "rga": 3,
    "ydoc": 2,
}
"""Memory per byte of a CRDT's msgpack-encoded state, by type: what tracemalloc
measured for entries loaded from snapshots (small counters ~1 KB whole, a 2 KB
rga text ~7 KB, a 20-element orset ~9 KB). An estimate: the budget bounds it."""

RGA_RUN_BYTES: Final = 110
"""Memory per run of an rga's sequence (its Run object, origin and id index
entries; tracemalloc). Its state joins the runs of a chain and writes a
deleted run as a count, so a text with every other element deleted (a
run per element, one request) encodes in about 9 bytes a run and took 12
times its state in memory, four times what STATE_BYTE_FACTORS counts:
runs are counted on their own as well."""

RESIZE_EVERY_OPS: Final = 256
"""Ops after which an entry's size is estimated again (an encode of its state):
often enough for the budget to notice growth, rare enough to cost little per op."""

# An op's growth bound, counted the same way for a local op (syncd/quotas.py,
# which imports these: they live here, below it, so the two cannot drift) and
# for another node's op replayed here (Engine._replay_op).

OP_GROWTH_OVERHEAD: Final = 64
"""Bytes a CRDT's state may take beyond an op's own encoding: the largest
measured was 60 (a presence entry's stamp and expiry; an orset tag 14, a
tree node 25, an rga element or a Yjs update 0; tests/test_quotas.py
checks it for every type)."""

FIXED_GROWTH: Final[dict[str, int]] = {
    "gcounter": OP_GROWTH_OVERHEAD,
    "pncounter": OP_GROWTH_OVERHEAD,
}
"""Types whose every op grows the state by at most this (a counter's op adds
at most one writer's entry, about 10 bytes), counted without encoding the op,
which would cost about as much as applying it."""

REMEASURE_MIN_BYTES: Final = 4096
"""Counted growth after which even a small CRDT is measured again: a counter
(about 80 bytes counted per increment) every ~50 ops, where one measure
costs 5-30 us, so well under a microsecond per op."""

Key = tuple[str, str]


def state_bytes(state: Any) -> int:
    """A CRDT state's size: its msgpack encoding, as snapshots store it (what
    the quotas count; docs/operations.md#quotas)."""
    return len(msgpack.packb(state, use_bin_type=True, default=repr))


def estimate_bytes(type_name: str, packed: int, op_ids: OpIdMemory) -> int:
    """About what an entry of this type, with a state of ``packed`` encoded
    bytes, takes in memory."""
    return ENTRY_BASE_BYTES + STATE_BYTE_FACTORS.get(type_name, 10) * packed + op_ids.approx_bytes()


def new_epoch() -> str:
    return secrets.token_hex(8)


def snapshot_state(crdt: Crdt) -> Any:
    """A CRDT's state as its snapshot keeps it: ``state()``, but a Yjs
    document's with the updates that wait for their dependencies beside it
    (:meth:`YDoc.snapshot_state`), which its state (reads) leaves
    out and a snapshot must not lose."""
    return crdt.snapshot_state() if isinstance(crdt, YDoc) else crdt.state()


def replica_state(crdt: Crdt) -> Any:
    """A CRDT's state as a replica loads it, to apply the op deltas after it
    (a subscription's snapshot, a ``?format=crdt`` read): ``state()``, but
    a Yjs document's with the updates that wait for their dependencies
    merged in and listed (:meth:`YDoc.replica_state`), or the replica would
    never get them (the op delta that lets them in carries only their
    dependency)."""
    return crdt.replica_state() if isinstance(crdt, YDoc) else crdt.state()


def export_entry(entry: Entry) -> dict[str, Any]:
    """One CRDT as a snapshot entry map (what :meth:`Engine.import_entry` loads)."""
    recent, aged = entry.op_ids.export()
    exported = {
        "ns": entry.ns,
        "id": entry.id,
        "type": entry.type,
        "seq": entry.seq,
        "epoch": entry.epoch,
        "state": snapshot_state(entry.crdt),
        "op_ids": recent,
    }
    if aged:
        exported["op_id_hashes"] = aged
    return exported


class GapError(Exception):
    """A replayed record skips seqs: the caller must fetch ``have+1 … got-1`` first."""

    def __init__(
        self, ns: str, crdt_id: str, have: int, got: int, epoch: str | None = None
    ) -> None:
        super().__init__(f"{ns}/{crdt_id}: have seq {have}, got {got} (epoch {epoch})")
        self.ns = ns
        self.crdt_id = crdt_id
        self.have = have
        self.got = got
        self.epoch = epoch


@dataclass(slots=True, eq=False)
class Entry:
    """One life of one CRDT."""

    ns: str
    id: str
    type: str
    crdt: Crdt
    seq: int
    epoch: str
    op_ids: OpIdMemory = field(default_factory=OpIdMemory)
    """The op_ids remembered (opids.py): the last window, and younger ones."""
    size: int = 0
    """Estimated bytes in memory (see :func:`estimate_bytes`)."""
    unsized_ops: int = 0
    """Ops applied since ``size`` was estimated."""
    state_bytes: int = 0
    """The state's encoded size when last measured (:func:`state_bytes`), with
    what a Yjs document held as pending then (:attr:`pending_bytes`)."""
    pending_bytes: int = 0
    """Of ``state_bytes``, what a Yjs document held as pending (updates waiting
    for their dependencies, ``YDoc.pending_bytes``) when last measured."""
    grown: int = 0
    """Growth counted for the ops applied since: by the quotas for local ops
    (syncd/quotas.py), by :meth:`Engine.replay` for replayed ones."""


@dataclass(slots=True)
class Plan:
    """A checked, not yet applied request body."""

    ns: str
    id: str
    type_name: str
    ops: list[dict[str, Any]]
    op_names: list[str]
    mask: int
    """OR of the ops' mask bits, for the permission check."""
    cls: type[Crdt]
    marks: dict[str, Any] | None = None
    """Fields the server adds to each record of this plan (a revert's
    ``reverts``, syncd/revert.py); never taken from a client's body."""


@dataclass(slots=True)
class ApplyResult:
    records: list[dict[str, Any]]
    """New op records, in order; empty when every op was an op_id repeat."""
    seq: int
    """The last seq: of the last newly applied op, else the highest repeated answer."""
    applied: int
    """Ops of the request applied, now or by the first request with their op_id."""
    duplicate: bool
    """Whether any op was an op_id repeat."""
    extra: dict[str, Any]
    """Answer extras of the ops (lists such as rga ``ids`` concatenated in order)."""
    created: bool


def _merge_extra(into: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        held = into.get(key)
        if isinstance(value, list):
            if isinstance(held, list):
                # Extended in place: a new list per op copied every id of the
                # batch's earlier ops again (1000 inserts of 1000 characters
                # took seconds).
                held.extend(value)
            else:
                # A copy of its own to extend: ``value`` is also an op's
                # answer that the op-id memory holds.
                into[key] = list(value)
        else:
            into[key] = value


def _check_op_id(op: dict[str, Any], where: str) -> None:
    op_id = op.get("op_id")
    if op_id is not None and (type(op_id) is not str or not 1 <= len(op_id) <= OP_ID_MAX_LEN):
        raise invalid_op(f"{where}op_id: must be a string of 1 to {OP_ID_MAX_LEN} characters")


class Engine:
    def __init__(
        self,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
        op_id_window: int = OP_ID_WINDOW,
        op_id_ttl_ms: int = OP_ID_TTL_MS,
        epoch_factory: Callable[[], str] = new_epoch,
    ) -> None:
        if op_id_window < 0 or op_id_ttl_ms < 0:
            raise ValueError("op_id_window and op_id_ttl_ms must be >= 0")
        self._clock = HybridClock(clock_ms)
        self._clock_ms = clock_ms
        self._window = op_id_window
        self._ttl_ms = op_id_ttl_ms
        self._epoch_factory = epoch_factory
        self._entries: OrderedDict[Key, Entry] = OrderedDict()
        """The resident CRDTs, least recently used first."""
        self.lookup: Callable[[Key], Entry | None] = self._entries.get
        """The resident entry of an ``(ns, id)`` key, as :meth:`get` (no change
        to the use order), without a Python call: the quotas read it twice per op."""
        self.resident_bytes = 0
        """The sum of the resident entries' estimated sizes."""
        self._pack = msgpack.Packer(use_bin_type=True, default=repr).pack
        """Encodes a replayed op's delta to count its growth (one Packer, reused)."""
        self.on_measured: Callable[[str, str, int], None] | None = None
        """Called with each CRDT's state size when it is measured (the store
        keeps it for the quotas: ``Store.note_size``)."""

    mask_bit = staticmethod(mask_bit)

    # -- lookups ----------------------------------------------------------

    def get(self, ns: str, crdt_id: str) -> Entry | None:
        """The resident entry (no change to the use order)."""
        return self._entries.get((ns, crdt_id))

    def touch(self, ns: str, crdt_id: str) -> Entry | None:
        """The resident entry, now the most recently used."""
        key = (ns, crdt_id)
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def lru(self) -> Iterator[Entry]:
        """The resident entries, least recently used first (a snapshot of the order)."""
        return iter(list(self._entries.values()))

    def clear(self) -> None:
        """Forget every CRDT (before loading the durable state again); the clock
        keeps its time, so new stamps stay monotonic."""
        self._entries.clear()
        self.resident_bytes = 0

    def drop(self, ns: str, crdt_id: str) -> bool:
        """Let a resident CRDT go from memory (the store still holds it)."""
        entry = self._entries.pop((ns, crdt_id), None)
        if entry is None:
            return False
        self.resident_bytes -= entry.size
        return True

    def resize(self, entry: Entry) -> None:
        """Estimate ``entry``'s size again (after ops, or before an eviction)."""
        crdt = entry.crdt
        packed = state_bytes(crdt.state())
        if isinstance(crdt, YDoc):
            # What waits for its dependencies is in no state, but in memory and
            # in snapshots: measured with it, the store keeps it (the quotas'
            # figures after a restart or an eviction) and the budget counts it.
            entry.pending_bytes = crdt.pending_bytes()
            packed += entry.pending_bytes
        size = estimate_bytes(entry.type, packed, entry.op_ids)
        if isinstance(crdt, Rga):
            size += RGA_RUN_BYTES * crdt.run_count()
        if (entry.ns, entry.id) in self._entries:
            self.resident_bytes += size - entry.size
        entry.size = size
        entry.state_bytes = packed
        entry.grown = 0
        entry.unsized_ops = 0
        measured = self.on_measured
        if measured is not None:
            measured(entry.ns, entry.id, packed)

    def now_ms(self) -> int:
        """The engine's hybrid clock (the time records are stamped with)."""
        return self._clock.now()

    def remember_op_id(self, entry: Entry, op_id: str, seq: int, extra: dict[str, Any]) -> None:
        """Remember ``op_id`` as answered at ``seq`` with ``extra``, under this
        engine's window and TTL, for a request that applied no op (a restore
        or revert that changed nothing: syncd.history.restore.remember_no_op).
        In memory only: no record carries it."""
        entry.op_ids.remember(op_id, seq, extra, self._clock.now(), self._window, self._ttl_ms)

    # -- writing ----------------------------------------------------------

    def plan(self, ns: str, crdt_id: str, body: Any, *, most: int = MAX_BATCH_OPS) -> Plan:
        """Check a request body (one op or a list of ops) without applying it.
        ``most`` bounds its ops: a client's request :data:`MAX_BATCH_OPS`; a
        body the server made that must apply whole (a revert's ops,
        syncd/revert.py) is bounded where it is made."""
        if type(body) is dict:
            ops: list[dict[str, Any]] = [body]
        elif type(body) is list:
            if not body:
                raise bad_request("body: an empty array of ops")
            if len(body) > most:
                raise bad_request(f"body: more than {most} ops in one batch")
            for i, op in enumerate(body):
                if type(op) is not dict:
                    raise bad_request(f"ops[{i}]: an op must be an object")
            ops = body
        else:
            raise bad_request("body: must be an op object or an array of op objects")
        key = (ns, crdt_id)
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        fixed = entry.type if entry is not None else type_for_id(crdt_id)
        type_name = fixed
        batch = len(ops) > 1
        for i, op in enumerate(ops):
            declared = op.get("type")
            if declared is None:
                continue
            if type(declared) is not str or declared not in TYPES:
                raise unknown_type(f"type: unknown CRDT type {declared!r}")
            if type_name is None:
                type_name = declared
            elif declared != type_name:
                where = f"ops[{i}]." if batch else ""
                raise type_mismatch(f"{where}type: {crdt_id!r} is a {type_name}, not a {declared}")
        if type_name is None:
            raise unknown_type(
                f"type: {crdt_id!r} has no type prefix; name the type in the op's 'type' field"
            )
        cls = TYPES.get(type_name) or crdt_class(type_name)
        bits = cls.OPS
        names: list[str] = []
        mask = 0
        # Where an op is in the body ("ops[3]." in a batch) is spelt out only
        # for a message: formatting it for every op of a batch was a tenth of
        # the batch's planning.
        for i, op in enumerate(ops):
            name = op.get("op")
            if type(name) is not str or name not in bits:
                where = f"ops[{i}]." if batch else ""
                raise invalid_op(
                    f"{where}op: must be one of {', '.join(sorted(bits))} for {type_name}"
                )
            names.append(name)
            mask |= bits[name]
            if "op_id" in op:
                _check_op_id(op, f"ops[{i}]." if batch else "")
            origin = op.get("origin")
            if origin is not None:
                check_origin(origin, f"ops[{i}].origin" if batch else "origin")
        return Plan(ns, crdt_id, type_name, ops, names, mask, cls)

    def apply(self, plan: Plan, client_id: int, *, measure: bool = True) -> ApplyResult:
        """Apply a plan as ``client_id``: every op or none. With ``measure``
        False the entry is not measured even when its ops since the last
        measure reach :data:`RESIZE_EVERY_OPS`: the caller applies a run of
        plans as one batch and calls :meth:`measure_if_due` once after them
        (a batch is measured once, after all of its ops)."""
        ops = plan.ops
        for op in ops:
            if "client_id" in op:
                claimed = op["client_id"]
                if claimed is not None and (type(claimed) is not int or claimed != client_id):
                    raise forbidden("client_id: differs from the token's client_id")
        entry = self._entries.get((plan.ns, plan.id))
        if entry is not None and entry.type != plan.type_name:
            # The CRDT was deleted and recreated with another type since the plan.
            raise type_mismatch(f"type: {plan.id!r} is a {entry.type}, not a {plan.type_name}")
        now = self._clock.now()
        if len(ops) == 1:
            return self._apply_one(plan, entry, ops[0], client_id, now, measure)
        return self._apply_batch(plan, entry, client_id, now, measure)

    def measure_if_due(self, ns: str, crdt_id: str) -> None:
        """Measure the resident entry if its ops since the last measure reach
        :data:`RESIZE_EVERY_OPS` (after plans applied with ``measure`` False)."""
        entry = self._entries.get((ns, crdt_id))
        if entry is not None and entry.unsized_ops >= RESIZE_EVERY_OPS:
            self.resize(entry)

    def _apply_one(
        self,
        plan: Plan,
        entry: Entry | None,
        op: dict[str, Any],
        client_id: int,
        now: int,
        measure: bool,
    ) -> ApplyResult:
        op_id = op.get("op_id")
        created = entry is None
        if entry is None:
            entry = Entry(plan.ns, plan.id, plan.type_name, plan.cls.new(), 0, "")
        elif op_id is not None:
            hit = entry.op_ids.get(op_id)
            if hit is not None:
                # The first answer again (it applied this op), flagged as a repeat.
                return ApplyResult([], hit[0], 1, True, dict(hit[1]), False)
        seq = entry.seq + 1
        # A refused op leaves the CRDT untouched (the type validates first), so no clone.
        delta = entry.crdt.apply_op(op, OpContext(client_id, now, seq))
        extra = entry.crdt.answer(delta)
        entry.seq = seq
        if created:
            entry.epoch = self._epoch_factory()
            self._add(entry)
        else:
            entry.unsized_ops += 1
            if measure and entry.unsized_ops >= RESIZE_EVERY_OPS:
                self.resize(entry)
        if op_id is not None:
            entry.op_ids.remember(op_id, seq, extra, now, self._window, self._ttl_ms)
        record = {
            "kind": "op",
            "ns": plan.ns,
            "id": plan.id,
            "type": plan.type_name,
            "seq": seq,
            "epoch": entry.epoch,
            "client_id": client_id,
            "ts": now,
            "op": delta,
            "op_id": op_id,
        }
        # The op's origin and the plan's marks: absent fields stay absent, so a
        # record without them costs nothing more.
        origin = op.get("origin")
        if origin is not None:
            record["origin"] = origin
        if plan.marks:
            record.update(plan.marks)
        return ApplyResult([record], seq, 1, False, extra, created)

    def _apply_batch(
        self, plan: Plan, entry: Entry | None, client_id: int, now: int, measure: bool
    ) -> ApplyResult:
        crdt = entry.crdt.clone() if entry is not None else plan.cls.new()
        held = entry.op_ids if entry is not None else OpIdMemory()
        seq = entry.seq if entry is not None else 0
        fresh: dict[str, tuple[int, dict[str, Any]]] = {}
        records: list[dict[str, Any]] = []
        extra: dict[str, Any] = {}
        repeat_seq = 0
        marks = plan.marks
        if marks:
            # A revert's or a restore's ops (the only marked ones) are one
            # request, applied whole or not at all: one of its op ids applied
            # already makes all of them a repeat. The same request computed on
            # another node on a later state has more ops; applying those past
            # the first one's took back what the first had left.
            hits = [
                hit
                for op in plan.ops
                if (op_id := op.get("op_id")) is not None and (hit := held.get(op_id)) is not None
            ]
            if hits:
                for hit in hits:
                    _merge_extra(extra, hit[1])
                seen = max(hit[0] for hit in hits)
                return ApplyResult([], seen, len(plan.ops), True, extra, False)
        for i, op in enumerate(plan.ops):
            op_id = op.get("op_id")
            if op_id is not None:
                hit = fresh.get(op_id) or held.get(op_id)
                if hit is not None:
                    repeat_seq = max(repeat_seq, hit[0])
                    _merge_extra(extra, hit[1])
                    continue
            try:
                delta = crdt.apply_op(op, OpContext(client_id, now, seq + 1))
            except ApiError as exc:
                raise ApiError(exc.status, exc.code, f"ops[{i}].{exc.message}") from None
            seq += 1
            answer = crdt.answer(delta)
            if answer:  # most types answer nothing beyond seq
                _merge_extra(extra, answer)
            if op_id is not None:
                fresh[op_id] = (seq, answer)
            record = {
                "kind": "op",
                "ns": plan.ns,
                "id": plan.id,
                "type": plan.type_name,
                "seq": seq,
                "epoch": "",
                "client_id": client_id,
                "ts": now,
                "op": delta,
                "op_id": op_id,
            }
            # As in _apply_one: the origin and the marks, when there are some.
            origin = op.get("origin")
            if origin is not None:
                record["origin"] = origin
            if marks:
                record.update(marks)
            records.append(record)
        duplicate = len(records) < len(plan.ops)
        # ``applied`` counts the ops applied now or by the request that first
        # carried their op_id: a repeat answers as the first time did.
        if not records:
            return ApplyResult([], repeat_seq, len(plan.ops), duplicate, extra, False)
        created = entry is None
        if entry is None:
            entry = Entry(plan.ns, plan.id, plan.type_name, crdt, seq, self._epoch_factory())
            self._add(entry)
        else:
            entry.crdt = crdt
            entry.seq = seq
            entry.unsized_ops += len(records)
            if measure and entry.unsized_ops >= RESIZE_EVERY_OPS:
                self.resize(entry)
        for record in records:
            record["epoch"] = entry.epoch
        op_ids, window, ttl_ms = entry.op_ids, self._window, self._ttl_ms
        for op_id, (answer_seq, answer) in fresh.items():
            op_ids.remember(op_id, answer_seq, answer, now, window, ttl_ms)
        return ApplyResult(records, seq, len(plan.ops), duplicate, extra, created)

    def delete(self, ns: str, crdt_id: str) -> dict[str, Any] | None:
        """End a CRDT's life; the deleted record, or None when there was none."""
        if not self.drop(ns, crdt_id):
            return None
        return {"kind": "deleted", "ns": ns, "id": crdt_id}

    def _add(self, entry: Entry) -> None:
        key = (entry.ns, entry.id)
        held = self._entries.pop(key, None)
        if held is not None:
            self.resident_bytes -= held.size
        self.resize(entry)
        self._entries[key] = entry
        self.resident_bytes += entry.size

    # -- replaying records ------------------------------------------------

    def replay(self, record: dict[str, Any]) -> bool:
        """Apply a record from the log or another node; False when already applied."""
        kind = record.get("kind")
        ns, crdt_id = record["ns"], record["id"]
        if kind == "deleted":
            return self.delete(ns, crdt_id) is not None
        if kind != "op":
            raise ValueError(f"unknown record kind {kind!r}")
        seq, epoch = record["seq"], record["epoch"]
        entry = self._entries.get((ns, crdt_id))
        return self._replay_op(record, ns, crdt_id, seq, epoch, entry)

    def replay_resident(self, record: dict[str, Any]) -> bool:
        """:meth:`replay` for the CRDTs held now only: a record of another CRDT
        (or of a life after the held one, but its first op) is passed over; the
        store holds it and :meth:`load` reads it with its CRDT."""
        kind = record.get("kind")
        ns, crdt_id = record["ns"], record["id"]
        entry = self._entries.get((ns, crdt_id))
        if kind == "deleted":
            return self.delete(ns, crdt_id) is not None
        if kind != "op":
            raise ValueError(f"unknown record kind {kind!r}")
        seq, epoch = record["seq"], record["epoch"]
        if seq != 1 and (entry is None or entry.epoch != epoch):
            return False
        return self._replay_op(record, ns, crdt_id, seq, epoch, entry)

    def _replay_op(
        self,
        record: dict[str, Any],
        ns: str,
        crdt_id: str,
        seq: int,
        epoch: str,
        entry: Entry | None,
    ) -> bool:
        if entry is not None and entry.epoch != epoch:
            if seq != 1:
                raise GapError(ns, crdt_id, 0, seq, epoch)
            entry = None
        if entry is None:
            if seq != 1:
                raise GapError(ns, crdt_id, 0, seq, epoch)
            cls = crdt_class(record["type"])
            entry = Entry(ns, crdt_id, cls.TYPE, cls.new(), 0, epoch)
            self._add(entry)
        elif seq <= entry.seq:
            return False
        elif seq > entry.seq + 1:
            raise GapError(ns, crdt_id, entry.seq, seq, epoch)
        elif record["type"] != entry.type:
            raise ValueError(f"{ns}/{crdt_id}: record of type {record['type']} for a {entry.type}")
        delta = record["op"]
        entry.crdt.apply_delta(delta)
        entry.seq = seq
        entry.unsized_ops += 1
        # Growth counted as the quotas count a local op's, and measured once
        # it passes a quarter of the state: measured only every
        # RESIZE_EVERY_OPS ops, CRDTs grown by another node's large ops stayed
        # far past the memory budget on a node that only replays them.
        fixed = FIXED_GROWTH.get(entry.type)
        grown = entry.grown = entry.grown + (
            fixed if fixed is not None else len(self._pack(delta)) + OP_GROWTH_OVERHEAD
        )
        if entry.unsized_ops >= RESIZE_EVERY_OPS or (
            grown > REMEASURE_MIN_BYTES and grown > entry.state_bytes >> 2
        ):
            self.resize(entry)
        op_id = record.get("op_id")
        ts = record["ts"]
        if op_id is not None:
            entry.op_ids.remember(
                op_id, seq, entry.crdt.answer(delta), ts, self._window, self._ttl_ms
            )
        self._clock.observe(ts)
        return True

    # -- reading ----------------------------------------------------------

    def read(self, ns: str, crdt_id: str, *, full: bool = False) -> dict[str, Any] | None:
        """The read answer (docs/data-model.md#reading), or with ``full`` the
        mergeable state as a replica loads it (:func:`replica_state`: a Yjs
        document's with what waits merged in)."""
        entry = self.touch(ns, crdt_id)
        if entry is None:
            return None
        head = {"id": crdt_id, "type": entry.type, "seq": entry.seq, "epoch": entry.epoch}
        if full:
            head["state"] = replica_state(entry.crdt)
        else:
            head.update(entry.crdt.view(self._clock.now()))
        return head

    def snapshot_delta(self, ns: str, crdt_id: str) -> dict[str, Any]:
        """A ``snapshot`` delta; for an unknown id seq 0 and null state and epoch.
        Its state is a replica's (:func:`replica_state`): subscribers load it
        and apply the op deltas after it."""
        entry = self._entries.get((ns, crdt_id))
        if entry is None:
            return {
                "kind": "snapshot",
                "ns": ns,
                "id": crdt_id,
                "type": type_for_id(crdt_id),
                "seq": 0,
                "epoch": None,
                "state": None,
            }
        return {
            "kind": "snapshot",
            "ns": ns,
            "id": crdt_id,
            "type": entry.type,
            "seq": entry.seq,
            "epoch": entry.epoch,
            "state": replica_state(entry.crdt),
        }

    # -- snapshots --------------------------------------------------------

    def export_entries(self) -> Iterator[dict[str, Any]]:
        """Every resident CRDT as an entry map, for store snapshots."""
        for entry in list(self._entries.values()):
            yield export_entry(entry)

    def export_one(self, ns: str, crdt_id: str) -> dict[str, Any] | None:
        """One CRDT as an entry map now (history checkpoints); None if unknown."""
        entry = self._entries.get((ns, crdt_id))
        return export_entry(entry) if entry is not None else None

    def load(
        self,
        ns: str,
        crdt_id: str,
        base: dict[str, Any] | None,
        records: Iterable[dict[str, Any]],
    ) -> Entry | None:
        """Bring one CRDT in from what its store holds: a checkpoint entry map
        (None: the empty state before its first op) and the op records after
        it, ascending. The resident entry (now the most recently used), or None
        when there was nothing to load. Raises ``GapError`` when the records do
        not follow the checkpoint."""
        if base is not None:
            self.import_entry(base)
        else:
            self.drop(ns, crdt_id)
        for record in records:
            self.replay(record)
        entry = self.touch(ns, crdt_id)
        if entry is not None and entry.unsized_ops:
            self.resize(entry)  # measured as loaded: the quotas count from here
        return entry

    def detached(self) -> Engine:
        """An engine of the same settings that holds nothing, for a
        :meth:`load` in a worker thread (syncd/residency.py), which
        :meth:`adopt` then brings in: nothing else sees it, so nothing
        applies to the CRDT while it is built there."""
        return Engine(
            clock_ms=self._clock_ms,
            op_id_window=self._window,
            op_id_ttl_ms=self._ttl_ms,
            epoch_factory=self._epoch_factory,
        )

    def adopt(self, detached: Engine, ns: str, crdt_id: str) -> Entry | None:
        """Make the CRDT that :meth:`load` built in ``detached`` resident
        here (replacing a held one), as loaded here: measured there (its
        size counted now, its measure handed to ``on_measured``), its
        records' stamps followed by this engine's clock. None when it
        built none (a life that ended)."""
        entry = detached.get(ns, crdt_id)
        if entry is None:
            return None
        self._clock.observe(detached._clock.last)
        key = (ns, crdt_id)
        held = self._entries.pop(key, None)
        if held is not None:
            self.resident_bytes -= held.size
        self._entries[key] = entry
        self.resident_bytes += entry.size
        measured = self.on_measured
        if measured is not None:
            measured(ns, crdt_id, entry.state_bytes)
        return entry

    def import_entry(self, entry: dict[str, Any]) -> None:
        """Load an entry map made by :meth:`export_entries` (replacing a held one)."""
        cls = crdt_class(entry["type"])
        op_ids = OpIdMemory.load(
            entry["op_ids"],
            entry.get("op_id_hashes"),
            now_ms=self._clock.now(),
            window=self._window,
            ttl_ms=self._ttl_ms,
        )
        self._add(
            Entry(
                entry["ns"],
                entry["id"],
                cls.TYPE,
                cls.from_state(entry["state"]),
                entry["seq"],
                entry["epoch"],
                op_ids,
            )
        )


__all__ = [
    "FIXED_GROWTH",
    "MAX_BATCH_OPS",
    "MAX_LIST_LIMIT",
    "OP_GROWTH_OVERHEAD",
    "OP_ID_MAX_LEN",
    "OP_ID_WINDOW",
    "PREFIXES",
    "REMEASURE_MIN_BYTES",
    "ApplyResult",
    "Engine",
    "Entry",
    "GapError",
    "Plan",
    "mask_bit",
]
