"""The storage interface: it orders, persists and acknowledges; it never interprets a CRDT.

A new backend implements ``Store`` below, all of it: the service, the
handlers and the metrics call every member and probe for none. What it must
provide, in short: ``open`` returns what is durable (a snapshot's entries and
the records after it); ``commit`` is the op path (run ``apply`` to get the
records, make them durable, return what ``apply`` returned) and ``append``
persists delete records; ``ops_since`` serves replays to resuming subscribers
(None when it cannot); ``ready``, ``reload`` and ``close`` cover failure and
shutdown (a storage failure raises ``errors.StoreUnavailable``, never a bare
``ApiError``); ``stats`` counts what it wrote. A store that several processes
share (``shared = True``, PostgreSQL) orders ops itself inside ``commit``;
a local one (``shared = False``) lets the service apply first and ``append``
runs of records at once. The store contract suite (``tests/store/contract``)
checks all of it against every backend; a new one passes it first.

Records
-------
The engine produces *op records*, plain msgpack-able maps::

    {"kind": "op", "ns": str, "id": str, "type": str, "seq": int, "epoch": str,
     "client_id": int, "ts": int, "op": {...delta op...}, "op_id": str | None,
     "origin": str (only when the op named one), "reverts": {...} (only a revert's),
     "restores": {...} (only a restore's)}

and *delete records*::

    {"kind": "deleted", "ns": str, "id": str}

A snapshot is a sequence of *entry maps* exported by the engine (opaque here)::

    {"ns", "id", "type", "seq", "epoch", "state", "op_ids": [...]}

Recovery hands back the newest snapshot's entries, then every record written
after it, in the order they were appended; the application feeds them to the
engine (``Engine.import_entry`` then ``Engine.replay_resident``) as it
iterates them. A store that ``loads_on_demand`` may leave CRDTs out of both:
``load`` brings any CRDT it holds back, one at a time, when it is used, and
the engine lets CRDTs go from memory only where ``holds`` says ``load`` would
rebuild exactly what it had.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

from syncd.crdt.window import KEY_BITS, kind_of, text_key
from syncd.store.catalogue import Usage as Usage

Record = dict[str, Any]
Loaded = tuple[dict[str, Any] | None, list[Record]]
"""One CRDT as a store holds it: a checkpoint entry map (None: the empty
state before seq 1) and the op records after it, ascending."""
Listed = tuple[str, str, int]
"""A CRDT in a listing: id, type, seq."""
SnapshotSource = Callable[[], Iterable[dict[str, Any]]]
EntrySource = Callable[[str, str], dict[str, Any] | None]
"""One CRDT's entry map as the engine holds it now (None if it holds none)."""


# Attribution as the history index keeps it (each op's writer and *tag*),
# so that a revert finds one writer's ops, and the ops of the kinds its type
# reads, without decoding every record of its window. A tag packs two keys
# (syncd.crdt.window.text_key, 30 bits each) and two flags: bits 0-29 the key
# of the delta's op name (0: none), bit 30 set for a revert's or a restore's
# op (its record carries ``reverts`` or ``restores``), bit 31 set in every tag
# ``attribution`` makes, bits 32-61 the origin's key (0: no origin). A tag of
# 0 says nothing: the record must be decoded to know.
_KIND_MASK: Final = (1 << KEY_BITS) - 1
_REVERTS_BIT: Final = 1 << 30
_KNOWN_BIT: Final = 1 << 31
_ORIGIN_SHIFT: Final = 32
_INT64: Final = 1 << 63


def attribution(record: Record) -> tuple[int, int]:
    """An op record's ``client_id`` and tag (see the layout above); ``(0,
    0)``, which says nothing, for a record whose client id is not an int64."""
    client_id = record.get("client_id")
    if type(client_id) is not int or not -_INT64 <= client_id < _INT64:
        return 0, 0
    origin = record.get("origin")
    tag = _KNOWN_BIT | kind_of(record.get("op"))
    if type(origin) is str:
        tag |= text_key(origin) << _ORIGIN_SHIFT
    if "reverts" in record or "restores" in record:
        tag |= _REVERTS_BIT
    return client_id, tag


class Retained:
    """Retained op records of one CRDT life, ascending by seq, as a store
    read them: each op's seq, writer and tag (:func:`attribution`; a tag of
    0 says nothing) known without decoding it, its record decoded when it
    is first read (:meth:`record`); or every record's msgpack encoding as
    stored, for a reader that needs one field of each (:meth:`encodings`)."""

    __slots__ = ("_encodings", "_load", "_records", "seqs", "tags", "writers")

    def __init__(
        self,
        seqs: Sequence[int],
        writers: Sequence[int],
        tags: Sequence[int],
        load: Callable[[int], Record],
        encodings: Callable[[], Sequence[bytes]] | None = None,
    ) -> None:
        if not len(seqs) == len(writers) == len(tags):
            raise ValueError("retained ops need one seq, writer and tag each")
        self.seqs = seqs
        self.writers = writers
        self.tags = tags
        self._load = load
        self._encodings = encodings
        self._records: list[Record | None] = [None] * len(seqs)

    @classmethod
    def of(cls, records: list[Record]) -> Retained:
        """Records already decoded (ascending by seq)."""
        told = [attribution(record) for record in records]
        held = cls(
            [record["seq"] for record in records],
            [client_id for client_id, _ in told],
            [tag for _, tag in told],
            records.__getitem__,
        )
        held._records = list(records)
        return held

    def __len__(self) -> int:
        return len(self.seqs)

    def may_be_by(self, client_id: int | None, origin: str | None) -> list[int]:
        """The ops (by index) that may be by ``client_id`` (None: anyone) with
        ``origin`` (None: any): all but those the store knows are not."""
        tags, writers = self.tags, self.writers
        if origin is None:
            if client_id is None:
                return list(range(len(tags)))
            return [i for i, tag in enumerate(tags) if not tag or writers[i] == client_id]
        key = text_key(origin)
        if client_id is None:
            return [i for i, tag in enumerate(tags) if not tag or tag >> _ORIGIN_SHIFT == key]
        return [
            i
            for i, tag in enumerate(tags)
            if not tag or (tag >> _ORIGIN_SHIFT == key and writers[i] == client_id)
        ]

    def may_be_reverts(self) -> list[int]:
        """The ops (by index) that may be a revert's or a restore's (whose
        record may carry ``reverts`` or ``restores``)."""
        return [i for i, tag in enumerate(self.tags) if not tag or tag & _REVERTS_BIT]

    def kinds(self) -> list[int]:
        """Each op's kind key (``syncd.crdt.window.text_key`` of its delta's
        op name; 0: not known)."""
        return [tag & _KIND_MASK for tag in self.tags]

    def record(self, i: int) -> Record:
        """Op ``i``'s record (decoded now if it was not yet)."""
        record = self._records[i]
        if record is None:
            record = self._records[i] = self._load(i)
        return record

    def encodings(self) -> Sequence[bytes] | None:
        """Every op's record as the store keeps it (msgpack, checked), in
        order; None when the store holds them decoded (read :meth:`record`)."""
        return None if self._encodings is None else self._encodings()


class Applied(Protocol):
    """What ``commit``'s ``apply`` returns (the engine's ``ApplyResult``)."""

    @property
    def records(self) -> list[Record]:
        """The new op records, in order (empty when nothing new was applied)."""
        ...


AppliedT = TypeVar("AppliedT", bound=Applied)


@dataclass
class StoreStats:
    """A store's counters (exported as ``service_store_*`` metrics; see metrics.py).
    A counter that does not apply to a backend stays 0."""

    batches: int = 0
    """Group commits: one log write and sync, or one PostgreSQL transaction."""
    records_written: int = 0
    fsyncs: int = 0
    bytes_written: int = 0
    snapshots: int = 0
    failures: int = 0
    recovered_records: int = 0
    recovery_bytes_read: int = 0


@dataclass
class Recovered:
    """What a store found on disk (or in the database) at start-up."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    records: Sequence[Record] = field(default_factory=list)
    """In log order. It may decode its records while it is iterated (``FileStore``
    does, a chunk at a time): iterate it once, and keep only what is needed."""


class Store(Protocol):
    shared: bool
    """True when other processes write the same data: ``commit`` then orders
    ops itself and callers must not apply ahead of it (no staging)."""

    stats: StoreStats

    async def open(self) -> Recovered:
        """Open (lock, recover, repair a torn tail) and return the state to load."""
        ...

    def set_snapshot_source(self, source: SnapshotSource, entry: EntrySource | None = None) -> None:
        """Give the store a way to read every CRDT's entry map when it compacts,
        and one CRDT's when it writes a history checkpoint."""
        ...

    @property
    def loads_on_demand(self) -> bool:
        """Whether :meth:`load` can bring back any CRDT this store holds, so
        the engine may let CRDTs go from memory (False: it holds them all)."""
        ...

    async def load(self, ns: str, crdt_id: str) -> Loaded | None:
        """The CRDT's current life as durable now, or None when it has none."""
        ...

    def holds(self, ns: str, crdt_id: str, epoch: str, seq: int) -> bool:
        """Whether :meth:`load` would give back exactly life ``epoch`` at ``seq``
        (every record up to it durable and readable)."""
        ...

    async def list_ids(self, ns: str, prefix: str, after: str | None, limit: int) -> list[Listed]:
        """Up to ``limit`` live CRDTs of ``ns`` whose id starts with ``prefix``,
        after ``after``, sorted by id (as durable now)."""
        ...

    def note_size(self, ns: str, crdt_id: str, size: int) -> None:
        """The engine's size of a CRDT now (after an op or a load), for the
        quotas (syncd/quotas.py). Called before the op's records are written:
        a shared store writes it with them."""
        ...

    async def usage(self, ns: str) -> Usage:
        """The namespace's live CRDTs and the sum of their sizes (a shared store
        may answer from a cache at most ``USAGE_REFRESH_S`` old)."""
        ...

    def usage_now(self, ns: str) -> Usage:
        """:meth:`usage` as known now, without waiting (a local store: exact)."""
        ...

    def usages(self) -> dict[str, Usage]:
        """What is known now of every namespace that holds a CRDT (never
        waits; a walk of them all: metrics read :meth:`usage_total` and
        :meth:`largest_usages` instead)."""
        ...

    def usage_total(self) -> tuple[int, Usage]:
        """How many namespaces :meth:`usages` lists, and their usages summed:
        kept as usages change, so O(1) (a metrics scrape)."""
        ...

    def largest_usages(self, k: int) -> list[tuple[str, Usage]]:
        """At most ``k`` (at most ``LARGEST_KEPT``) namespaces of
        :meth:`usages` with the most bytes, largest first, and their usages:
        O(namespaces changed since the last call + ``LARGEST_KEPT``), save
        one walk of every namespace after the largest shrank."""
        ...

    def unmeasured(self, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` live CRDTs whose size the store does not know, from
        after the last one the previous call returned, wrapping around to the
        first: successive calls hand out each such CRDT once per round (those
        measured meanwhile drop out), so a caller that passes over some (it
        cannot read them) does linear work, and knows it went round when a
        CRDT comes back."""
        ...

    async def history(
        self, ns: str, crdt_id: str, epoch: str, latest: int, before: int | None, limit: int
    ) -> tuple[list[Record], int]:
        """Up to ``limit`` retained op records of the CRDT's life ``epoch`` (now
        at seq ``latest``) with a seq below ``before``, newest first; and the
        oldest seq whose state ``history_base`` can rebuild."""
        ...

    async def history_window(
        self, ns: str, crdt_id: str, epoch: str, latest: int, since: int | None, most: int
    ) -> tuple[Retained, int]:
        """The retained op records of the CRDT's life ``epoch`` (now at seq
        ``latest``) from seq ``since`` on (None: from the oldest seq whose
        state ``history_base`` can rebuild, plus one), ascending, at most
        ``most`` (the first); and that oldest seq. Each as :class:`Retained`
        holds it: its writer and tag known without decoding it, the record
        decoded when read (a store that keeps them encoded decodes only the
        few of a long window that a revert reads)."""
        ...

    async def history_base(
        self, ns: str, crdt_id: str, epoch: str, latest: int, seq: int
    ) -> tuple[dict[str, Any] | None, list[Record]]:
        """What rebuilds the state right after op ``seq``: the newest retained
        checkpoint (an entry map) at or before it (None: start empty) and the
        op records after it up to ``seq``, ascending. Raises ``ApiError`` 410
        ``history_expired`` (with ``oldest``) when ``seq`` is older than retained."""
        ...

    async def append(self, records: Sequence[Record]) -> None:
        """Persist ``records`` in order. Returns once they are durable (per the fsync
        mode); raises ``errors.StoreUnavailable`` when they are not."""
        ...

    def append_soon(self, records: Sequence[Record]) -> asyncio.Future[None]:
        """``append`` without a coroutine: the records are queued now, in the
        caller's loop step (a local store's memory and log move together), and
        the future resolves once they are durable. Raises
        ``errors.StoreUnavailable`` at once when the store refuses writes; the
        future fails with it when the records are not durable. The op path of
        a local store uses it (``CrdtService.apply_soon``): no task per request."""
        ...

    async def commit(self, ns: str, crdt_id: str, apply: Callable[[], AppliedT]) -> AppliedT:
        """The op path for one request on one CRDT: call ``apply()`` (the engine
        applies the request's ops and returns their records) at the point the
        store orders it, make the records durable, return ``apply()``'s result.
        An ``ApiError`` from ``apply()`` (the op was refused) passes through
        with nothing written; raises ``errors.StoreUnavailable`` when the
        records are not durable, so the type alone tells the two apart."""
        ...

    async def ops_since(self, ns: str, crdt_id: str, epoch: str, since: int) -> list[Record] | None:
        """Every op record of this CRDT life with seq > ``since``, or None when the
        store no longer holds all of them (the caller then sends a snapshot)."""
        ...

    @property
    def ready(self) -> bool:
        """False while writes would fail (disk full, database down)."""
        ...

    @property
    def wal_last_seq(self) -> int:
        """The last durable log sequence number."""
        ...

    async def reload(self) -> Recovered:
        """Read the durable state again (after a write failure left memory ahead of it)."""
        ...

    async def close(self) -> None:
        """Flush what is pending and release the data dir / connections."""
        ...
