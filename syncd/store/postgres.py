"""PostgresStore: ops and snapshots as rows in PostgreSQL, written by group commit.

Theory of operation
-------------------
*Rows.* Each CRDT has a row in ``crdts`` (its current life: type, epoch, the
last seq, deleted); ``ops`` holds the op records of every live CRDT and
``snapshots`` one entry map per CRDT (``pg_schema``). This module reads and
writes those rows and nothing else. Keeping the engine equal to the rows that
other nodes write (notifications, the replication stream, catch-up) is the
cluster layer's job (``syncd.cluster``), reached through one narrow hook, the
``Follower``.

*Group commit.* ``commit(ns, id, apply)`` queues the request and waits. A
batch takes everything queued (at most ``MAX_BATCH_WRITES`` requests) and
commits it as one transaction:

1. lock every CRDT row the batch touches, once, in sorted key order, with one
   multi-row upsert (a placeholder row for a new CRDT). Every node locks in
   the same order, so two nodes' batches cannot deadlock; a node that waits
   for another's lock then sees that node's ops. In the same round trip, a
   second statement (it runs once the locks are held) reads the ops other
   nodes committed after what the engine holds of each CRDT.
2. ``Follower.bring_up`` makes the engine's entry equal each locked row (it
   replays what other nodes committed and fans it out), so the engine numbers
   the new ops after theirs and its op_id window is current: op_id
   idempotency holds across nodes and restarts.
3. run each request's ``apply()`` in arrival order. One that fails its
   checks (``ApiError``: validation, permission, type) is answered with its
   error at once and leaves the engine untouched; the rest go on.
4. write every record with one multi-row insert and move every row's seq
   with one update, in one statement with the batch's NOTIFY payloads
   (``Follower.announce``: as few as the 8000-byte limit allows), so other
   nodes hear of exactly what committed; write the snapshots that fall due,
   and commit: one round trip (a psycopg pipeline, whose statements up to
   its Sync are one implicit transaction: no BEGIN or COMMIT statements).
5. answer each request. PostgreSQL holds its notification lock from a notifying
   transaction's pre-commit until its WAL flush, so notifying commits are
   serialised across the cluster: with one transaction per batch that costs
   little (per request, as syncd once did, it capped every node's rate).

*One round trip when nothing races.* A batch whose CRDTs no other node wrote
lately (``Follower.contended``) skips waiting for steps 1-2: it takes the
engine to be current, applies at once and sends the locks, the writes, the
notification and the commit in one flush. The write then checks each row
against the (epoch, seq) the engine numbered after (a row that moved gets a
NULL seq, which its NOT NULL refuses; a seq another node took collides with
the ops primary key), so a lost race aborts the transaction; the engine
entries are read back quietly and the batch is done again the way above.
The yield after step 5 (the callers resume under the batch's locks) keeps
each CRDT's fan-out in seq order when another node's next op arrives at once.

One batch commits at a time, in arrival order (a second one in flight made
batches smaller and the node slower: the cost is per transaction, in
psycopg and the server, not the WAL flush; so too under contention, a second
batch on other CRDTs while the first waits for other nodes' rows: three nodes
writing 64 counters took 0.65x the ops/s, 5.5 ops per commit against 12.2,
``perf.studies.cluster_scaling``); the next one may wait up to
``GATHER_WAIT_S`` for the requests its callers are about to send. Each batch
holds the per-key asyncio locks (``locks``) of its CRDTs, which the cluster
layer takes too before it changes an entry, so subscribers see each CRDT's
seqs in order.

*Failure.* A batch whose transaction fails answers ``StoreUnavailable``
(503) to every request in it; ``Follower.commit_failed`` drops each CRDT
that ``apply()`` touched from the engine and reads it back from the rows
(memory was ahead of the database). A failure before any ``apply()`` (a
dead pooled connection after a server restart) is retried once on a fresh
connection. A network error marks the store not ready until the cluster
layer's probe reaches the server again.

*Start-up and loads.* ``open`` migrates the schema and reads the newest
``gid`` on a connection of its own; it loads no CRDT. While PostgreSQL
cannot be reached it waits (``pg_start.keep_trying``: for as long as it
takes, logging why each attempt failed); a refusal waiting cannot fix (no
such database, a refused password or role) raises ``DatabaseSetupError``
naming ``DATABASE_URL``. ``load`` reads one CRDT (its snapshot and the ops
after it, one repeatable-read transaction, under the CRDT's lock) when the
node first uses it, and ``holds`` lets the node drop one from memory when
nothing is in flight on it: the rows are the truth. Each history read
(``history``, ``history_window``, ``history_base``) is one such transaction
too, so that a write or a trim between its statements cannot tear it.

*Usage.* For the namespace quotas a node reads a namespace's figures (an
aggregate over its rows) at most every ``USAGE_REFRESH_S`` and adds what it
writes itself in between. It keeps the figures of ``USAGE_CACHE_MAX``
namespaces, and past that only those used lately or with work under way:
the namespace gauges of metrics are of the namespaces this node used
lately, not of the database.

``wal_last_seq`` is the ops table's global identity (``ops.gid``): the newest
this node committed or saw.

A new backend implements ``syncd.store.base.Store``; only a store shared by
several processes also needs something like the ``Follower``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import msgpack
import psycopg
import psycopg.errors

from syncd.errors import ApiError, StoreUnavailable, history_expired
from syncd.store.base import (
    Applied,
    AppliedT,
    EntrySource,
    Listed,
    Loaded,
    Record,
    Recovered,
    Retained,
    SnapshotSource,
    StoreStats,
    Usage,
    attribution,
)
from syncd.store.catalogue import UsageBoard
from syncd.store.history_index import DEFAULT_RETENTION, Retention
from syncd.store.pg_pool import DEFAULT_POOL_SIZE, PgConn, PgPool, abort_after
from syncd.store.pg_schema import NoSchemaError, SchemaTooNewError, current_schema, migrate
from syncd.store.pg_start import DatabaseSetupError, keep_trying

__all__ = [
    "ABORT_GRACE_S",
    "CHANNEL_MAX_BYTES",
    "COMMIT_TIMEOUT_S",
    "GATHER_WAIT_S",
    "MAX_BATCH_WRITES",
    "NETWORK_ERRORS",
    "OPS_RETAINED",
    "OPS_SINCE_MAX",
    "SNAPSHOT_EVERY_OPS",
    "STALLED_PEER_S",
    "Follower",
    "Key",
    "KeyedLocks",
    "PostgresStore",
    "Row",
    "RowReader",
    "channel_name",
]

log = logging.getLogger("syncd.store.postgres")

Key = tuple[str, str]

SNAPSHOT_EVERY_OPS: Final = 500
"""A CRDT's snapshot entry is rewritten when its seq crosses a multiple of this:
start-up replays at most this many ops per CRDT after its snapshot."""

OPS_RETAINED: Final = 1000
"""Ops kept behind a CRDT's newest snapshot (older ones are deleted when it is
written), for ``?since=`` replays and for nodes that fell a little behind."""

USAGE_REFRESH_S: Final = 1.0
"""How old a namespace's usage (for the quotas) may be before it is read
again: one aggregate over the namespace's rows per second at most, and a
cluster may pass a namespace quota by what its nodes write within it. Between
reads this node adds what it writes itself."""

USAGE_CACHE_MAX: Final = 10_000
"""Namespaces whose usage a node keeps (``PostgresStore._usage``), beyond those
in use. A node reads a namespace's figures for the quota checks of its writes
(and for ``GET .../usage``); kept for ever, a node that served many
namespaces over its life held an entry for each of them, against the rule
that a node's memory follows what is in use. Past this, the figures used
longest ago are dropped once idle (:data:`USAGE_IDLE_S`) with nothing in
flight on them, and read again when the namespace is next used. About
240 bytes an entry with a 15-character name (measured): 2.4 MB at the
bound; a namespace that comes back costs one aggregate read, as one whose
figures are stale does."""

USAGE_IDLE_S: Final = 10.0
"""How long a namespace's figures go unused (no ``usage()`` call) before they
may be dropped past :data:`USAGE_CACHE_MAX`. Stale for the quotas already after
:data:`USAGE_REFRESH_S`; kept longer because a write checks its quotas
against them (``usage_now``, which cannot wait for a read) some steps after
its ``usage()``: a load or a commit in flight on the namespace keeps them
(``_in_flight``), this covers the steps between (a large Yjs document's
nesting read in a thread), so that a check never finds them gone and
counts the namespace as empty."""

OPS_SINCE_MAX: Final = 10_000
"""A replay longer than this is not read; the subscriber gets a snapshot."""

COMMIT_TIMEOUT_S: Final = 10.0
"""The longest a batch may take (waiting for another node's row locks
included) before it is abandoned and its requests answered 503. Its
connection is then shut down (``pg_pool.abort_after``), not its task
cancelled: psycopg answers a cancellation with a cancel request and a wait
for the results, which on a silent network took 10 s more."""

ABORT_GRACE_S: Final = 1.0
"""How long past its deadline a transaction whose connection was shut down
may take to notice before its task is cancelled too."""

STALLED_PEER_S: Final = 5.0
"""How long a session that holds a row lock this node waits for may itself
wait for its client, inside its transaction, before this node ends it
(``pg_terminate_backend``; only a session of the node's own role). Such a
session is a node frozen mid-transaction (SIGSTOP, a frozen VM, a long GC):
PostgreSQL waits for its next statement for as long as the freeze lasts,
and without this every other node's batch on that CRDT waited too, and with
it every other write of those nodes (one batch commits at a time). A live
node sends its next statement within milliseconds; half of
``COMMIT_TIMEOUT_S`` leaves the waiting batch time to commit. The ended
transaction rolls back: nothing of it was acknowledged."""

MAX_BATCH_WRITES: Final = 512
"""Requests committed in one transaction at most. Bounds the statement sizes
and the time one batch holds its rows; more waiting requests form the next
batch, which starts as soon as this one commits."""

GATHER_WAIT_S: Final = 0.002
"""How long a batch may wait for the requests its callers are about to send.
A batch takes what queued while the previous one committed; when that is
fewer than were waiting then (the callers just answered are still sending
their next requests), it waits this long at most for them: PostgreSQL's
commit_delay idea. Measured with 16 clients over 64 CRDTs: 8 ops per
transaction without it (two halves taking turns), 10 with 1 ms, 16 with
2 ms, and 20-40% more ops/s. A lone client never waits (one was waiting,
one is queued). Longer gains little: 6 ms made three nodes' batches over 64
counters 15.3 ops per commit against 12.5-13.1, but their nodes then idled
while gathering: ops/s 1.09x and 1.15x in one run alternating both, 1.03x
in the next (a lone node 1.04x, one hot counter 1.00-1.01x): within the
noise of such runs, so not taken."""

NETWORK_ERRORS: Final = (psycopg.OperationalError, OSError, TimeoutError)
"""What a lost server or connection raises (as opposed to a refused statement)."""

_CONFLICTS: Final = (psycopg.errors.NotNullViolation, psycopg.errors.UniqueViolation)
"""What an optimistic batch's write raises when another node moved its rows first."""


@dataclass(frozen=True, slots=True)
class Row:
    """A CRDT's row in ``crdts``: its current life as the database has it."""

    epoch: str
    seq: int
    deleted: bool

    @property
    def live(self) -> bool:
        return not self.deleted and self.seq > 0


@dataclass(slots=True, eq=False)
class _HeldUsage:
    """A namespace's usage as this node knows it."""

    usage: Usage
    at: float
    """When it was read (``time.monotonic``; -inf: read it again at the next use)."""
    used: float
    """When ``usage()`` last asked for it (the order of ``PostgresStore._usage``)."""


class KeyedLocks:
    """A lock per CRDT, forgotten when nobody holds or waits for it.

    A key is held while it is in ``_held``; its deque holds the futures of
    those waiting, each handed the lock in turn (first come, first served,
    as ``asyncio.Lock``). Taking a free key costs a dictionary insert and no
    await: a batch takes every key it writes (about 14 for 16 ops over 64
    CRDTs), which through one ``asyncio.Lock`` and context manager each cost
    32 us a batch, 2 us an op. ``on_free`` is called with a key its last
    holder released and nobody waits for (the cluster layer then applies what
    other nodes sent for it meanwhile, without a task of its own)."""

    def __init__(self) -> None:
        self._held: dict[Key, deque[asyncio.Future[None]]] = {}
        self.on_free: Callable[[Key], None] | None = None

    def busy(self, key: Key) -> bool:
        return key in self._held

    async def acquire(self, key: Key) -> None:
        waiters = self._held.get(key)
        if waiters is None:
            self._held[key] = deque()
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(key)  # handed the lock as the wait was cancelled
            raise

    def release(self, key: Key) -> None:
        waiters = self._held[key]
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():  # else its waiting was cancelled
                waiter.set_result(None)
                return
        del self._held[key]
        if self.on_free is not None:
            self.on_free(key)

    @contextlib.asynccontextmanager
    async def hold(self, key: Key) -> AsyncIterator[None]:
        await self.acquire(key)
        try:
            yield
        finally:
            self.release(key)

    @contextlib.asynccontextmanager
    async def hold_all(self, keys: Sequence[Key]) -> AsyncIterator[None]:
        """Every key's lock, taken in the order given (sorted, by the caller)."""
        taken = 0
        try:
            for key in keys:
                await self.acquire(key)
                taken += 1
            yield
        finally:
            for key in keys[:taken]:
                self.release(key)


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpack(raw: bytes) -> Any:
    return msgpack.unpackb(raw, raw=False, strict_map_key=False)


ReadAhead = dict[Key, tuple[str, int, list[tuple[int, bytes]]]]
"""Per CRDT: the epoch and seq the engine held, and the (seq, record) rows after
them, read with a batch's locks and decoded only if asked for."""


class RowReader:
    """Reads of one CRDT's rows on a connection (inside the caller's transaction)."""

    def __init__(self, conn: PgConn, read_ahead: ReadAhead | None = None) -> None:
        self._conn = conn
        self._read_ahead = read_ahead or {}

    async def ops_after(self, key: Key, epoch: str, seq: int) -> list[Record]:
        ahead = self._read_ahead.get(key)
        if ahead is not None and ahead[0] == epoch and ahead[1] <= seq:
            # Every op after ahead[1] as of the lock; the engine may have heard of
            # some since (a notification): those are not decoded twice.
            return [unpack(raw) for at, raw in ahead[2] if at > seq]
        cur = await self._conn.execute(_OPS_AFTER, (*key, epoch, seq))
        return [unpack(raw) for (raw,) in await cur.fetchall()]

    async def snapshot(self, key: Key, epoch: str) -> Record | None:
        cur = await self._conn.execute(
            "SELECT entry FROM snapshots WHERE ns = %s AND id = %s AND epoch = %s",
            (*key, epoch),
        )
        found = await cur.fetchone()
        return unpack(found[0]) if found is not None else None


class Follower(Protocol):
    """The cluster layer as the op path needs it (``syncd.cluster.Replicator``).

    Called with the CRDT's ``KeyedLocks`` lock held."""

    def position(self, key: Key) -> tuple[str, int] | None:
        """(epoch, seq) of what the engine holds of ``key``; None: nothing."""
        ...

    def contended(self, key: Key) -> bool:
        """Whether other nodes wrote ``key`` lately: then a batch waits for its
        row locks and reads their ops before applying, instead of assuming the
        engine is current."""
        ...

    async def bring_up(self, rows: RowReader, key: Key, row: Row | None) -> None:
        """Make the engine's entry for ``key`` equal ``row`` (None: no row),
        reading what is missing through ``rows``."""
        ...

    def export(self, key: Key) -> Record:
        """The engine's entry map for ``key`` as it is now (for a snapshot)."""
        ...

    def announce(self, records: Sequence[Record], packed: Sequence[bytes]) -> list[str]:
        """The NOTIFY payloads telling other nodes of these committed records."""
        ...

    def announce_deleted(self, key: Key, epoch: str) -> list[str]:
        """The NOTIFY payloads telling other nodes that this life ended."""
        ...

    def commit_failed(self, key: Key, row: Row | None) -> None:
        """A commit failed after ``apply()`` ran at ``row``: memory may be ahead."""
        ...

    def conflicted(self) -> None:
        """An optimistic batch lost a race to another node (it is redone)."""
        ...

    def ended(self, key: Key) -> None:
        """This node ended ``key``'s life in the database: drop whatever the
        engine holds of it (a catch-up may have read it back in between)."""
        ...

    def trouble(self) -> None:
        """The database misbehaved: probe it (and catch up) soon."""
        ...


@dataclass(slots=True, eq=False)
class _Write:
    """One queued ``commit`` call."""

    key: Key
    apply: Callable[[], Applied]
    future: asyncio.Future[Any]
    result: Applied | None = None


@dataclass(slots=True)
class _KeyWrite:
    """What one batch writes for one CRDT."""

    row: Row
    records: list[Record] = field(default_factory=list)


_LOCK_ROWS: Final = (
    "INSERT INTO crdts (ns, id, type, epoch, seq, deleted) "
    "SELECT k.ns, k.id, '', '', 0, true FROM unnest(%b::text[], %b::text[]) "
    "WITH ORDINALITY AS k(ns, id, n) ORDER BY k.n "
    "ON CONFLICT (ns, id) DO UPDATE SET seq = crdts.seq "
    "RETURNING ns, id, epoch, seq, deleted"
)
# The ops after what the engine holds, for every CRDT of a batch at once. Run
# unprepared (planned each time): a plan cached while ``ops`` was small (a new
# database) hash-joins a scan of the whole table, and kept it as the table grew,
# every contended batch read every op (measured: 4x PostgreSQL's CPU per op).
_OPS_AFTER_MANY: Final = (
    "SELECT o.ns, o.id, o.seq, o.record FROM unnest(%b::text[], %b::text[], %b::text[], %b::bigint[])"
    " AS k(ns, id, epoch, seq) JOIN ops o"
    " ON o.ns = k.ns AND o.id = k.id AND o.epoch = k.epoch AND o.seq > k.seq"
    " ORDER BY o.ns, o.id, o.seq"
)
_READ_ROW: Final = "SELECT epoch, seq, deleted FROM crdts WHERE ns = %s AND id = %s"
_READ_ROWS: Final = (
    "SELECT c.ns, c.id, c.epoch, c.seq, c.deleted FROM unnest(%b::text[], %b::text[])"
    " AS k(ns, id) JOIN crdts c ON c.ns = k.ns AND c.id = k.id"
)
_OPS_AFTER: Final = (
    "SELECT record FROM ops WHERE ns = %s AND id = %s AND epoch = %s AND seq > %s ORDER BY seq"
)
# Every record of the batch, every row it moves and the batch's notifications
# (sent at commit: delivered if and only if it commits) in one statement; the
# newest gid back.
_WRITE_BATCH: Final = (
    "WITH ins AS (INSERT INTO ops (ns, id, epoch, seq, record, writer, tag) "
    "SELECT * FROM unnest(%(ns)b::text[], %(id)b::text[], %(epoch)b::text[],"
    " %(seq)b::bigint[], %(record)b::bytea[], %(writer)b::bigint[], %(tag)b::bigint[])"
    " RETURNING gid), "
    # A row that is not what the engine numbered after (another node moved it
    # since) gets seq NULL, which NOT NULL refuses: the transaction aborts.
    "upd AS (UPDATE crdts c SET type = u.type, epoch = u.epoch, deleted = false,"
    " bytes = CASE WHEN u.bytes >= 0 THEN u.bytes ELSE c.bytes END,"
    " seq = CASE WHEN (u.was_epoch <> '' AND c.epoch = u.was_epoch AND c.seq = u.was_seq"
    " AND NOT c.deleted) OR (u.was_epoch = '' AND (c.deleted OR c.seq = 0))"
    " THEN u.seq END"
    " FROM unnest(%(row_ns)b::text[], %(row_id)b::text[], %(row_type)b::text[],"
    " %(row_epoch)b::text[], %(row_seq)b::bigint[], %(row_was_epoch)b::text[],"
    " %(row_was_seq)b::bigint[], %(row_bytes)b::bigint[])"
    " AS u(ns, id, type, epoch, seq, was_epoch, was_seq, bytes)"
    " WHERE c.ns = u.ns AND c.id = u.id) "
    "SELECT (SELECT max(gid) FROM ins),"
    " (SELECT count(pg_notify(%(channel)b, p)) FROM unnest(%(notify)b::text[]) AS p)"
)
_NOTIFY: Final = "SELECT count(pg_notify(%b, p)) FROM unnest(%b::text[]) AS p"
# The placeholder rows _LOCK_ROWS made for new CRDTs that the batch did not
# create after all (every request on them refused): gone with the commit.
_DROP_PLACEHOLDERS: Final = (
    "DELETE FROM crdts c USING unnest(%b::text[], %b::text[]) AS k(ns, id)"
    " WHERE c.ns = k.ns AND c.id = k.id AND c.epoch = '' AND c.seq = 0"
)
# The sessions of this role that hold a lock the given backend waits for and
# have waited for their own client (inside a transaction) since their last
# statement began, longer than the given seconds: ended (see STALLED_PEER_S).
# Waiting for the client is waiting for its next statement (ClientRead) or for
# it to take the answer (ClientWrite: frozen while a large one, a snapshot
# read under the row locks, was on its way).
_END_STALLED_HOLDERS: Final = (
    "SELECT b.pid, b.application_name, host(b.client_addr), pg_terminate_backend(b.pid) "
    "FROM pg_stat_activity b "
    "WHERE b.pid = ANY(pg_blocking_pids(%s)) AND b.usename = session_user"
    " AND b.wait_event IN ('ClientRead', 'ClientWrite') AND b.xact_start IS NOT NULL"
    " AND b.state_change < clock_timestamp() - make_interval(secs => %s)"
)


CHANNEL_MAX_BYTES: Final = 63
"""The longest channel name PostgreSQL takes (NAMEDATALEN - 1, in bytes):
pg_notify refuses a longer one, LISTEN cuts it short."""


def channel_name(schema: str) -> str:
    """The NOTIFY channel of the deployment in ``schema``: ``syncd:<schema>``
    when that fits; else its first characters and a digest of the whole name,
    so that it fits in bytes (a non-ASCII name long in bytes made a channel
    pg_notify refused, and every write failed) and two long names that start
    alike do not share one (their nodes heard each other's notices)."""
    name = f"syncd:{schema}"
    if len(name.encode()) <= CHANNEL_MAX_BYTES:
        return name
    digest = "~" + hashlib.sha256(schema.encode()).hexdigest()[:16]
    room = CHANNEL_MAX_BYTES - len(digest)
    head = name.encode()[:room].decode(errors="ignore")  # whole characters only
    return head + digest


class PostgresStore:
    shared = True

    def __init__(
        self,
        database_url: str,
        *,
        publication: str | None = None,
        pool_size: int = DEFAULT_POOL_SIZE,
        snapshot_every: int = SNAPSHOT_EVERY_OPS,
        ops_retained: int = OPS_RETAINED,
        open_timeout_s: float | None = None,
        setting: str = "DATABASE_URL",
        commit_timeout_s: float = COMMIT_TIMEOUT_S,
        stalled_peer_s: float = STALLED_PEER_S,
        max_batch_writes: int = MAX_BATCH_WRITES,
        gather_wait_s: float = GATHER_WAIT_S,
        on_written: Callable[[int], None] | None = None,
        history_retention: Retention | None = None,
        on_commit: Callable[[float], None] | None = None,
        usage_cache_max: int = USAGE_CACHE_MAX,
        usage_idle_s: float = USAGE_IDLE_S,
    ) -> None:
        if (
            snapshot_every < 1
            or ops_retained < 0
            or max_batch_writes < 1
            or gather_wait_s < 0
            or usage_cache_max < 1
            or usage_idle_s < 0
        ):
            raise ValueError(
                "snapshot_every, max_batch_writes and usage_cache_max must be >= 1,"
                " ops_retained, gather_wait_s and usage_idle_s >= 0"
            )
        self.pool = PgPool(database_url, pool_size)
        self._publication = publication
        self._snapshot_every = snapshot_every
        self._ops_retained = ops_retained
        self.history_retention = history_retention or Retention.parse(DEFAULT_RETENTION)
        self._open_timeout = open_timeout_s
        """How long ``open`` waits for an unreachable server (None: until cancelled)."""
        self._setting = setting
        """The setting ``database_url`` came from, named when the database refuses us."""
        self.commit_timeout = commit_timeout_s
        self._stalled_peer_s = stalled_peer_s
        self._watchers: set[asyncio.Task[None]] = set()
        """Tasks ending stalled sessions that hold a batch's row locks."""
        self._max_batch = max_batch_writes
        self._on_written = on_written
        self._on_commit = on_commit
        """Called with the seconds each committed transaction took, BEGIN to COMMIT."""
        self.schema = ""
        self.channel = ""
        """The NOTIFY channel of this deployment: one per database and schema."""
        self.locks = KeyedLocks()
        self.follower: Follower | None = None
        self.stats = StoreStats()
        self._up = False
        self._opened = False
        self._closed = False
        self._queue: deque[_Write] = deque()
        self._batch: asyncio.Task[None] | None = None
        self._gather: asyncio.TimerHandle | None = None
        self._gather_wait = gather_wait_s
        self._waiting = 0
        """Callers awaiting an answer."""
        self._peak = 0
        """The most callers waiting at once during the batch in flight."""
        self._target = 1
        """Requests the next batch waits for (at most ``gather_wait_s``)."""
        self._last_gid = 0
        self._sizes: dict[Key, int] = {}
        """Sizes the engine reported during the batch in flight (note_size)."""
        self._usage: dict[str, _HeldUsage] = {}
        """Each namespace's usage as last read (and what this node wrote
        since), least recently used first: changed only through
        :meth:`_hold_usage` and :meth:`_drop_usage`, which keep the board;
        bounded by :meth:`_trim_usage`."""
        self._usage_max = usage_cache_max
        self._usage_idle_s = usage_idle_s
        self._in_flight: dict[str, int] = {}
        """Loads and commits under way, by namespace: their figures are kept
        (a commit's apply() checks the quotas against them)."""
        self._usage_board = UsageBoard()
        """``_usage`` summed over the namespaces holding a CRDT, and the
        largest (for metrics)."""
        self._usage_reads: dict[str, asyncio.Future[Usage]] = {}
        self._creating: dict[str, int] = {}
        """CRDTs a batch in flight creates, by namespace: counted in _usage
        already, not committed yet (so no read of the table sees them)."""
        self._created_while_read: dict[str, int] = {}
        """CRDTs created by batches that committed while the namespace's usage
        was being read (a key only while it is): the read may have missed them."""

    # -- the Store protocol ---------------------------------------------------

    @property
    def ready(self) -> bool:
        return self._up and not self._closed

    @property
    def snapshot_every(self) -> int:
        """A CRDT has a snapshot once its seq reaches this (one every this many ops)."""
        return self._snapshot_every

    @property
    def wal_last_seq(self) -> int:
        return self._last_gid

    def set_reachable(self, up: bool) -> None:
        """The cluster layer's verdict on the server (its probe)."""
        self._up = up and self._opened

    def note_gid(self, gid: int) -> None:
        self._last_gid = max(self._last_gid, gid)

    async def open(self) -> Recovered:
        await keep_trying(
            self._open_once,
            setting=self._setting,
            errors=(psycopg.Error, OSError),
            transient=NETWORK_ERRORS,
            give_up_after_s=self._open_timeout,
        )
        recovered = Recovered()  # CRDTs load on first use (load)
        # Channel names are identifiers (at most 63 bytes).
        self.channel = channel_name(self.schema)
        self._opened = True
        self._up = True
        log.info(
            "PostgreSQL store open (schema %s): %d snapshots, %d ops to replay",
            self.schema,
            len(recovered.entries),
            len(recovered.records),
        )
        return recovered

    async def _open_once(self) -> None:
        # A connection of its own, not the pool's: the pool retries in the
        # background and reports a refusal as a bare timeout, while this
        # attempt fails with the server's reason, which keep_trying judges.
        conn = await self.pool.connect()
        try:
            try:
                self.schema = await current_schema(conn)
                await migrate(conn, publication=self._publication)
            except (NoSchemaError, SchemaTooNewError) as exc:
                raise DatabaseSetupError(self._setting, str(exc)) from None
            await self.newest_gid(conn)
        finally:
            await conn.close()

    async def database(self) -> str:
        """The name of the database ``database_url`` reaches (``current_database()``),
        waiting for an unreachable server as :meth:`open` does."""

        async def once() -> str:
            conn = await self.pool.connect()
            try:
                cur = await conn.execute("SELECT current_database()")
                row = await cur.fetchone()
                return str(row[0]) if row is not None else ""
            finally:
                await conn.close()

        return await keep_trying(
            once,
            setting=self._setting,
            errors=(psycopg.Error, OSError),
            transient=NETWORK_ERRORS,
            give_up_after_s=self._open_timeout,
        )

    def set_snapshot_source(self, source: SnapshotSource, entry: EntrySource | None = None) -> None:
        """Unused: each commit writes the snapshots (and checkpoints) that fall due itself."""

    @property
    def loads_on_demand(self) -> bool:
        # A node reads a CRDT's rows when it is first used; the cluster layer
        # follows other nodes' writes only for the CRDTs it holds.
        return True

    async def load(self, ns: str, crdt_id: str) -> Loaded | None:
        """The CRDT's live row as committed now: its snapshot entry (if any) and
        the ops after it, read in one repeatable-read transaction under the
        CRDT's lock (so the cluster layer queues what it hears meanwhile and
        applies it after the caller has installed this, in the same step)."""
        key = (ns, crdt_id)
        loaded: Loaded | None = None

        async def then(rows: RowReader, row: Row | None) -> None:
            nonlocal loaded
            if row is None or not row.live:
                return
            snapshot = await rows.snapshot(key, row.epoch)
            base = snapshot["seq"] if snapshot is not None else 0
            records = await rows.ops_after(key, row.epoch, base) if row.seq > base else []
            if (records and records[0]["seq"] != base + 1) or base + len(records) != row.seq:
                raise RuntimeError(
                    f"{ns}/{crdt_id}: the ops after seq {base} up to {row.seq} are not all held"
                )
            loaded = (snapshot, records)

        # A write loads its CRDT between its usage() and its commit: the
        # namespace's figures are kept meanwhile (_trim_usage).
        self._pin(ns)
        try:
            async with self.locks.hold(key):
                await self.read_key(key, then)
        except NETWORK_ERRORS:
            raise StoreUnavailable("the database is unavailable") from None
        finally:
            self._unpin(ns)
        return loaded

    def holds(self, ns: str, crdt_id: str, epoch: str, seq: int) -> bool:
        # Nothing in flight on the CRDT: what the node holds is committed (a
        # commit applies and writes under the lock), and the rows are the truth.
        return not self.locks.busy((ns, crdt_id))

    async def list_ids(self, ns: str, prefix: str, after: str | None, limit: int) -> list[Listed]:
        # ``prefix`` is matched by a range, not LIKE (ids may hold % and _), and
        # in code point order (COLLATE "C"), as the other stores sort.
        query = (
            'SELECT id, type, seq FROM crdts WHERE ns = %s AND NOT deleted AND id COLLATE "C" > %s'
            ' AND id COLLATE "C" >= %s ORDER BY id COLLATE "C" LIMIT %s'
        )
        try:
            async with self._connection() as conn:
                cur = await conn.execute(query, (ns, after or "", prefix, limit))
                rows = await cur.fetchall()
        except NETWORK_ERRORS:
            raise StoreUnavailable("the database is unavailable") from None
        out: list[Listed] = []
        for crdt_id, type_name, seq in rows:
            if not crdt_id.startswith(prefix):
                break
            out.append((crdt_id, type_name, seq))
        return out

    # -- usage (the quotas) ------------------------------------------------------

    def note_size(self, ns: str, crdt_id: str, size: int) -> None:
        # Written with the batch's row update (_write); sizes noted outside a
        # commit (a load) are dropped at the end of the next batch.
        self._sizes[(ns, crdt_id)] = size

    async def usage(self, ns: str) -> Usage:
        now = time.monotonic()
        held = self._usage.pop(ns, None)
        if held is not None:
            self._usage[ns] = held  # the most recently used last
            held.used = now
            if now - held.at < USAGE_REFRESH_S:
                return held.usage
        reading = self._usage_reads.get(ns)
        if reading is None:
            reading = asyncio.get_running_loop().create_future()
            self._usage_reads[ns] = reading
            self._created_while_read[ns] = 0
            try:
                found = await self._read_usage(ns)
            except BaseException as exc:
                reading.set_exception(exc)
                reading.exception()  # retrieved: the callers waiting get it
                raise
            finally:
                del self._usage_reads[ns]
                missed = self._created_while_read.pop(ns)
            # What this node created and the read may not have seen: a batch
            # still in flight, and those that committed meanwhile (perhaps
            # counted twice until the next read: never fewer than there are).
            missed += self._creating.get(ns, 0)
            found = Usage(found.crdts + missed, found.bytes, found.unmeasured)
            now = time.monotonic()
            self._hold_usage(ns, found, now)
            held = self._usage[ns] = self._usage.pop(ns)  # used now: last
            held.used = now
            self._trim_usage()
            reading.set_result(found)
            return found
        return await reading

    async def _read_usage(self, ns: str) -> Usage:
        try:
            async with self._connection() as conn:
                cur = await conn.execute(
                    "SELECT count(*), coalesce(sum(bytes) FILTER (WHERE bytes >= 0), 0),"
                    " count(*) FILTER (WHERE bytes < 0)"
                    " FROM crdts WHERE ns = %s AND NOT deleted",
                    (ns,),
                )
                row = await cur.fetchone()
        except NETWORK_ERRORS:
            raise StoreUnavailable("the database is unavailable") from None
        if row is None:
            return Usage()
        return Usage(int(row[0]), int(row[1]), int(row[2]))

    def _count_usage(self, ns: str, crdts: int, grown: int) -> None:
        """What this node wrote, added to the namespace's usage until it is read again."""
        held = self._usage.get(ns)
        if held is not None:
            usage = held.usage
            self._hold_usage(
                ns,
                Usage(max(0, usage.crdts + crdts), max(0, usage.bytes + grown), usage.unmeasured),
                held.at,
            )

    def _hold_usage(self, ns: str, usage: Usage, at: float) -> None:
        """``ns``'s usage is ``usage`` as of ``at``: the board's totals move by
        the difference, and the namespace is ranked again at the next scrape.
        A namespace not held yet is held last (used now)."""
        board = self._usage_board
        held = self._usage.get(ns)
        if held is not None and held.usage.crdts > 0:
            was = held.usage
            board.namespaces -= 1
            board.crdts -= was.crdts
            board.bytes -= was.bytes
            board.unmeasured -= was.unmeasured
        if usage.crdts > 0:
            board.namespaces += 1
            board.crdts += usage.crdts
            board.bytes += usage.bytes
            board.unmeasured += usage.unmeasured
        board.dirty.add(ns)
        if held is None:
            self._usage[ns] = _HeldUsage(usage, at, time.monotonic())
        else:
            held.usage = usage
            held.at = at

    def _drop_usage(self, ns: str) -> None:
        """Forget ``ns``'s usage: the board as if it had never been held."""
        was = self._usage.pop(ns).usage
        board = self._usage_board
        if was.crdts > 0:
            board.namespaces -= 1
            board.crdts -= was.crdts
            board.bytes -= was.bytes
            board.unmeasured -= was.unmeasured
        board.forget(ns)

    def _trim_usage(self) -> None:
        """Past ``usage_cache_max`` namespaces held, drop the least recently
        used whose figures are stale (read over ``USAGE_REFRESH_S`` ago, so
        the next usage() reads them anyway) and idle (``usage_idle_s``), and
        that nothing is under way on: a read, a creation counted but not
        committed (``_creating``, ``_created_while_read``), a load or a commit
        (``_in_flight``). Stops at the first entry used lately (so is every
        one after it): O(dropped + kept busy ones). The figures used lately
        are kept past the bound: a node's memory follows what is in use."""
        usage = self._usage
        excess = len(usage) - self._usage_max
        if excess <= 0:
            return
        now = time.monotonic()
        idle = now - self._usage_idle_s
        stale = now - USAGE_REFRESH_S
        busy = (self._usage_reads, self._creating, self._created_while_read, self._in_flight)
        dropped: list[str] = []
        for ns, held in usage.items():
            if held.used > idle:
                break
            if held.at > stale or any(ns in pending for pending in busy):
                continue
            dropped.append(ns)
            if len(dropped) == excess:
                break
        for ns in dropped:
            self._drop_usage(ns)

    def _pin(self, ns: str) -> None:
        """A load or a commit on ``ns`` is under way: keep its figures."""
        self._in_flight[ns] = self._in_flight.get(ns, 0) + 1

    def _unpin(self, ns: str) -> None:
        left = self._in_flight[ns] - 1
        if left:
            self._in_flight[ns] = left
        else:
            del self._in_flight[ns]

    def _read_usage_again(self, ns: str) -> None:
        """The next usage() reads the namespace's figures; until then they stay."""
        held = self._usage.get(ns)
        if held is not None:
            held.at = -math.inf

    def _created(self, namespaces: list[str], committed: bool) -> None:
        """The creations counted by _note_write are committed, or not written
        (then taken back)."""
        creating = self._creating
        for ns in namespaces:
            left = creating[ns] - 1
            if left:
                creating[ns] = left
            else:
                del creating[ns]
            if not committed:
                self._count_usage(ns, -1, 0)
            elif ns in self._created_while_read:
                self._created_while_read[ns] += 1

    def usage_now(self, ns: str) -> Usage:
        held = self._usage.get(ns)
        return held.usage if held is not None else Usage()

    def usages(self) -> dict[str, Usage]:
        """The namespaces this node holds figures of (see USAGE_CACHE_MAX) that
        hold a live CRDT: those it used lately, not every namespace."""
        return {ns: held.usage for ns, held in self._usage.items() if held.usage.crdts > 0}

    def usage_total(self) -> tuple[int, Usage]:
        board = self._usage_board
        return board.namespaces, Usage(board.crdts, board.bytes, board.unmeasured)

    def largest_usages(self, k: int) -> list[tuple[str, Usage]]:
        names = self._usage_board.largest(k, self._counted_bytes, self._every_counted_bytes)
        return [(ns, self._usage[ns].usage) for ns in names]

    def _counted_bytes(self, ns: str) -> int | None:
        held = self._usage.get(ns)
        return held.usage.bytes if held is not None and held.usage.crdts > 0 else None

    def _every_counted_bytes(self) -> Iterator[tuple[str, int]]:
        return ((ns, held.usage.bytes) for ns, held in self._usage.items() if held.usage.crdts > 0)

    def unmeasured(self, limit: int) -> list[tuple[str, str]]:
        # Rows written before sizes were kept (schema version 4) are measured
        # when they are next written; usage() counts them as unmeasured.
        return []

    async def history(
        self, ns: str, crdt_id: str, epoch: str, latest: int, before: int | None, limit: int
    ) -> tuple[list[Record], int]:
        key = (ns, crdt_id, epoch)
        try:
            async with self._snapshot() as conn:
                cur = await conn.execute(
                    "SELECT record FROM ops WHERE ns = %s AND id = %s AND epoch = %s"
                    " AND seq < %s ORDER BY seq DESC LIMIT %s",
                    # Up to the seq this node has applied: another node's
                    # newer ops are not in the state the answer is about.
                    (*key, latest + 1 if before is None else min(before, latest + 1), limit),
                )
                rows = await cur.fetchall()
                oldest = await self._oldest(conn, key, latest)
        except (psycopg.Error, OSError, TimeoutError) as exc:
            log.warning("history of %s/%s: %s", ns, crdt_id, exc)
            raise StoreUnavailable("the database is unavailable") from None
        return [unpack(raw) for (raw,) in rows], oldest

    async def history_window(
        self, ns: str, crdt_id: str, epoch: str, latest: int, since: int | None, most: int
    ) -> tuple[Retained, int]:
        key = (ns, crdt_id, epoch)
        try:
            async with self._snapshot() as conn:
                oldest = await self._oldest(conn, key, latest)
                cur = await conn.execute(
                    "SELECT seq, writer, tag, record FROM ops WHERE ns = %s AND id = %s"
                    " AND epoch = %s AND seq >= %s AND seq <= %s ORDER BY seq LIMIT %s",
                    (*key, oldest + 1 if since is None else since, latest, most),
                )
                rows = await cur.fetchall()
        except (psycopg.Error, OSError, TimeoutError) as exc:
            log.warning("history of %s/%s: %s", ns, crdt_id, exc)
            raise StoreUnavailable("the database is unavailable") from None
        raws: list[bytes] = [row[3] for row in rows]

        def load(i: int) -> Record:
            record: Record = unpack(raws[i])
            return record

        return (
            Retained(
                [row[0] for row in rows],
                [row[1] for row in rows],
                [row[2] for row in rows],
                load,
                lambda: raws,
            ),
            oldest,
        )

    async def history_base(
        self, ns: str, crdt_id: str, epoch: str, latest: int, seq: int
    ) -> tuple[dict[str, Any] | None, list[Record]]:
        key = (ns, crdt_id, epoch)
        try:
            async with self._snapshot() as conn:
                cur = await conn.execute(
                    "SELECT seq, entry FROM checkpoints WHERE ns = %s AND id = %s"
                    " AND epoch = %s AND seq <= %s ORDER BY seq DESC LIMIT 1",
                    (*key, seq),
                )
                found = await cur.fetchone()
                base, entry = (found[0], unpack(found[1])) if found else (0, None)
                cur = await conn.execute(
                    "SELECT record FROM ops WHERE ns = %s AND id = %s AND epoch = %s"
                    " AND seq > %s AND seq <= %s ORDER BY seq",
                    (*key, base, seq),
                )
                records = [unpack(raw) for (raw,) in await cur.fetchall()]
                complete = len(records) == seq - base and (
                    not records or records[0]["seq"] == base + 1
                )
                oldest = None
                if complete and found is None and not records:
                    # Seq 0, the empty state: a base only while the life's ops
                    # are held from seq 1 (a pruned one answered it, and a
                    # restore to it took the CRDT back past what is retained).
                    oldest = await self._oldest(conn, key, latest)
                    complete = oldest == 0
                if not complete:
                    if oldest is None:
                        oldest = await self._oldest(conn, key, latest)
                    raise history_expired(
                        f"{ns}/{crdt_id}: the history before seq {oldest} is no longer retained",
                        oldest,
                    )
        except (psycopg.Error, OSError, TimeoutError) as exc:
            log.warning("history of %s/%s: %s", ns, crdt_id, exc)
            raise StoreUnavailable("the database is unavailable") from None
        return entry, records

    @contextlib.asynccontextmanager
    async def _snapshot(self) -> AsyncIterator[PgConn]:
        """A pooled connection inside one repeatable-read, read-only
        transaction, as :meth:`load` reads: every statement of a history read
        sees the rows of one moment. Read as separate statements, a write or a
        trim (a snapshot write deleting the ops behind its checkpoint) that
        committed between two of them tore the answer: a window from
        ``oldest`` whose ops began past it, a page listing ops older than its
        ``oldest``, a base refused as expired at a seq still retained. It
        costs three statements more (BEGIN, SET, COMMIT: a page of 50 ops
        read in 0.72 ms instead of 0.37 on a local server; pipelined, no
        faster), on reads that are requests of their own, not the op path."""
        async with self._connection() as conn, conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield conn

    async def _oldest(self, conn: PgConn, key: tuple[str, str, str], latest: int) -> int:
        """The oldest seq whose state the retained rows rebuild (read on ``conn``,
        in its caller's snapshot)."""
        cur = await conn.execute(
            "SELECT (SELECT min(seq) FROM ops WHERE ns = %s AND id = %s AND epoch = %s),"
            " (SELECT min(seq) FROM checkpoints WHERE ns = %s AND id = %s AND epoch = %s)",
            (*key, *key),
        )
        row = await cur.fetchone()
        first_op, first_cp = row if row is not None else (None, None)
        if first_op == 1:
            return 0
        if first_cp is not None:
            return int(first_cp)
        return latest

    async def reload(self) -> Recovered:
        """Nothing to load: CRDTs are read from the database when they are used."""
        return Recovered()

    async def append(self, records: Sequence[Record]) -> None:
        """Deletes (op records go through :meth:`commit`)."""
        for record in records:
            if record.get("kind") != "deleted":
                raise ValueError("PostgresStore.append takes deleted records; ops use commit()")
            await self._delete(record["ns"], record["id"])

    def append_soon(self, records: Sequence[Record]) -> asyncio.Future[None]:
        """:meth:`append` as a task: deletes only, as there (ops use commit())."""
        return asyncio.ensure_future(self.append(records))

    async def ops_since(self, ns: str, crdt_id: str, epoch: str, since: int) -> list[Record] | None:
        if not self.ready:
            return None
        try:
            async with self._connection() as conn:
                cur = await conn.execute(
                    _OPS_AFTER + " LIMIT %s", (ns, crdt_id, epoch, since, OPS_SINCE_MAX + 1)
                )
                rows = await cur.fetchall()
        except (psycopg.Error, OSError, TimeoutError) as exc:
            log.warning("ops_since %s/%s: %s", ns, crdt_id, exc)
            return None
        if not rows or len(rows) > OPS_SINCE_MAX:
            return None
        records = [unpack(raw) for (raw,) in rows]
        if records[0]["seq"] != since + 1:
            return None  # pruned behind a snapshot
        return records

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._up = False
        if self._gather is not None:
            self._gather.cancel()
        batch = self._batch
        if batch is not None:
            # The batch in flight finishes (its requests are answered); the rest get 503.
            await asyncio.wait([batch], timeout=self.commit_timeout)
            batch.cancel()
        self._fail_queued()
        await self.pool.close()

    # -- the op path: group commit ----------------------------------------------

    async def commit(self, ns: str, crdt_id: str, apply: Callable[[], AppliedT]) -> AppliedT:
        """Order, apply and persist one request's ops on one CRDT (see the module doc)."""
        if not self.ready or self.follower is None:
            raise StoreUnavailable("the database is unavailable")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[AppliedT] = loop.create_future()
        self._queue.append(_Write((ns, crdt_id), apply, future))
        self._waiting += 1
        self._pin(ns)  # apply() checks the quotas against its figures: kept until answered
        self._peak = max(self._peak, self._waiting)
        if self._batch is None:
            if len(self._queue) >= self._target:
                self._start_batch()
            elif self._gather is None:
                self._gather = loop.call_later(self._gather_wait, self._start_batch)
        try:
            return await future
        finally:
            self._waiting -= 1
            self._unpin(ns)

    def _start_batch(self) -> None:
        if self._gather is not None:
            self._gather.cancel()
            self._gather = None
        if self._batch is not None or self._closed:
            return
        queue = self._queue
        batch: list[_Write] = []
        while queue and len(batch) < self._max_batch:
            write = queue.popleft()
            if not write.future.done():  # else the caller went away
                batch.append(write)
        if batch:
            self._batch = asyncio.get_running_loop().create_task(self._run_batch(batch))

    async def _run_batch(self, batch: list[_Write]) -> None:
        try:
            await self._commit_batch(batch, sorted({w.key for w in batch}))
        finally:
            self._batch = None
            self._sizes.clear()
            # The next batch waits (at most the gather time) for as many requests
            # as were waiting during this one: the callers just answered send
            # their next ones a moment later, and one batch then carries them all.
            self._target = max(1, min(self._peak, self._max_batch))
            self._peak = self._waiting - len(batch)
            if self._closed:
                self._fail_queued()
            elif len(self._queue) >= self._target:
                self._start_batch()
            elif self._queue and self._gather is None:
                self._gather = asyncio.get_running_loop().call_later(
                    self._gather_wait, self._start_batch
                )

    def _fail_queued(self) -> None:
        while self._queue:
            write = self._queue.popleft()
            if not write.future.done():
                write.future.set_exception(StoreUnavailable("the database is unavailable"))

    async def _commit_batch(self, batch: list[_Write], keys: list[Key]) -> None:
        follower = self.follower
        assert follower is not None
        loop = asyncio.get_running_loop()
        async with self.locks.hold_all(keys):
            optimistic = not any(follower.contended(key) for key in keys)
            retried = False
            # One bound for the batch, whatever it does again (a conflict, a
            # dead pooled connection): its callers get an answer by then.
            deadline = loop.time() + self.commit_timeout
            while True:
                # The rows as they were when apply() ran: what subscribers have seen.
                applied: dict[Key, Row | None] = {}
                if not self.ready:
                    self._answer_all(batch, StoreUnavailable("the database is unavailable"))
                    return
                left = deadline - loop.time()
                # Until the pool hands out a connection, a failure is a busy
                # pool (every connection in use), not a lost server.
                checking_out = True
                try:
                    if left <= 0:
                        raise TimeoutError("the batch's time is up")
                    async with (
                        asyncio.timeout(left + ABORT_GRACE_S),
                        self.pool.connection() as conn,
                        abort_after(conn, left),
                        self._ending_stalled_holders(conn),
                    ):
                        checking_out = False
                        await self._commit_on(conn, keys, batch, applied, optimistic=optimistic)
                    return
                except asyncio.CancelledError as exc:
                    self._failed(batch, applied, exc)
                    raise
                except _CONFLICTS as exc:
                    if not optimistic:
                        # Under the row locks no other node moves them: a
                        # refusal like any other (raised, it left every
                        # request of the batch without an answer).
                        self._failed(batch, applied, exc)
                        return
                    # Another node moved a row: undo (the engine reads these
                    # CRDTs back, quietly up to what subscribers saw) and do
                    # the batch again, waiting for the locks this time.
                    for key, row in applied.items():
                        follower.commit_failed(key, row)
                    follower.conflicted()
                    optimistic = False
                except Exception as exc:
                    if (
                        not retried
                        and not applied
                        and isinstance(exc, NETWORK_ERRORS)
                        and loop.time() < deadline
                    ):
                        # Dead pooled connections (the server restarted): nothing
                        # was applied, so try again on a fresh one.
                        retried = True
                        await self.pool.reset()
                        continue
                    self._failed(batch, applied, exc, checking_out=checking_out)
                    return

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[PgConn]:
        """A pooled connection for at most ``commit_timeout``: its socket is shut
        down then (``abort_after``), so a silent server costs no more than that."""
        async with (
            asyncio.timeout(self.commit_timeout + ABORT_GRACE_S),
            self.pool.connection() as conn,
            abort_after(conn, self.commit_timeout),
        ):
            yield conn

    @contextlib.asynccontextmanager
    async def _ending_stalled_holders(self, conn: PgConn) -> AsyncIterator[None]:
        """While the body runs on ``conn``: once it has run ``stalled_peer_s``,
        and then as often, end the sessions stalled on their client that hold
        a lock ``conn`` waits for (see STALLED_PEER_S). A timer only: a batch
        that commits in time starts nothing."""
        loop = asyncio.get_running_loop()
        pid = conn.info.backend_pid
        watch: list[asyncio.Task[None]] = []

        def start() -> None:
            task = loop.create_task(self._end_stalled_holders(pid))
            self._watchers.add(task)
            task.add_done_callback(self._watchers.discard)
            watch.append(task)

        timer = loop.call_later(self._stalled_peer_s, start)
        try:
            yield
        finally:
            # Not awaited: the body's exception (a cancellation among them)
            # goes on as it is.
            timer.cancel()
            for task in watch:
                task.cancel()

    async def _end_stalled_holders(self, waiter: int) -> None:
        while True:
            try:
                # A connection of its own, not a pooled one: the pool may be
                # all taken by requests waiting for the very locks the stalled
                # session holds (deletes of its CRDTs at once), and none came
                # free until they gave up at their deadline, the session left
                # in place for the next ones.
                other = await self.pool.connect()
                try:
                    cur = await other.execute(_END_STALLED_HOLDERS, (waiter, self._stalled_peer_s))
                    for pid, application, client, ended in await cur.fetchall():
                        log.warning(
                            "ended PostgreSQL session %s (application_name %r, client %s): it "
                            "held a row lock while waiting more than %.1f s for its client "
                            "(a node frozen mid-transaction?)%s",
                            pid,
                            application or "",
                            client or "local",
                            self._stalled_peer_s,
                            "" if ended else "; refused",
                        )
                finally:
                    await other.close()
            except (psycopg.Error, OSError) as exc:
                log.warning("could not end a stalled session holding a row lock: %s", exc)
            await asyncio.sleep(self._stalled_peer_s)

    def _answer_all(self, batch: list[_Write], error: StoreUnavailable) -> None:
        for write in batch:
            if not write.future.done():
                write.future.set_exception(error)

    def _failed(
        self,
        batch: list[_Write],
        applied: dict[Key, Row | None],
        exc: BaseException,
        *,
        checking_out: bool = False,
    ) -> None:
        """Answer the batch 503 and undo what it applied. ``checking_out``: it
        failed waiting for a pooled connection (all of them busy with other
        requests): the node is not marked unreachable for that (readiness
        503 and every write refused until the next probe), the probe, asked
        for now, decides whether the server is away."""
        self.stats.failures += 1
        log.warning(
            "commit of %d requests failed%s: %s",
            len(batch),
            " waiting for a free database connection" if checking_out else "",
            str(exc).strip() or type(exc).__name__,
        )
        follower = self.follower
        assert follower is not None
        for key, row in applied.items():
            follower.commit_failed(key, row)
        if isinstance(exc, NETWORK_ERRORS) and not checking_out:
            self._up = False
        follower.trouble()
        self._answer_all(batch, StoreUnavailable("the database is unavailable"))

    async def _commit_on(
        self,
        conn: PgConn,
        keys: list[Key],
        batch: list[_Write],
        applied: dict[Key, Row | None],
        *,
        optimistic: bool,
    ) -> None:
        follower = self.follower
        assert follower is not None
        writes: dict[Key, _KeyWrite] = {}
        gid_cur: psycopg.AsyncCursor[Any] | None = None
        held = {key: at for key in keys if (at := follower.position(key)) is not None}
        started = time.perf_counter()
        # One implicit transaction, without BEGIN and COMMIT (two statements
        # fewer a batch, for the node and the server): in autocommit, what the
        # pipeline sends up to its Sync, at the exit, is one transaction, which
        # the Sync commits and an error (or ROLLBACK) rolls back. psycopg reads
        # the locks' results mid-pipeline with a flush request, not a Sync, so
        # the row locks are held through to the commit
        # (tests/store/test_postgres.py checks both).
        created: list[str] = []
        """Namespaces of the CRDTs this batch creates, counted in usage as each
        is applied (see _note_write)."""
        try:
            async with conn.pipeline():
                cur = await conn.execute(_LOCK_ROWS, ([k[0] for k in keys], [k[1] for k in keys]))
                if optimistic:
                    # One round trip: the engine is taken to be current (no other
                    # node wrote these CRDTs lately); the write refuses rows that
                    # moved since, and the batch is then done again the other way.
                    rows = {
                        key: Row(at[0], at[1], False) if (at := held.get(key)) else Row("", 0, True)
                        for key in keys
                    }
                else:
                    rows = await self._lock_and_read(conn, keys, held, cur)
                for write in batch:
                    if write.future.done():
                        continue  # the caller went away before its ops were applied
                    row = rows[write.key]
                    applied.setdefault(write.key, row)
                    try:
                        write.result = result = write.apply()
                    except ApiError as exc:
                        write.future.set_exception(exc)  # untouched: the engine checks first
                        continue
                    if result.records:
                        self._note_write(writes, write.key, row, result.records, created)
                if not writes:
                    await conn.execute("ROLLBACK")  # refusals and op_id repeats only
                else:
                    gid_cur = await self._write(conn, writes)
                    unwritten = [key for key in keys if key not in writes]
                    if unwritten:
                        # A refused creation (a quota) must not leave its
                        # placeholder row for ever when the rest commits.
                        await conn.execute(
                            _DROP_PLACEHOLDERS,
                            ([k[0] for k in unwritten], [k[1] for k in unwritten]),
                            prepare=False,
                        )
        except BaseException:
            self._created(created, committed=False)
            raise
        self._created(created, committed=True)
        # Leaving the pipeline waited for every result: the batch is durable.
        if gid_cur is not None:
            found = await gid_cur.fetchone()
            if found is not None and found[0] is not None:
                self.note_gid(int(found[0]))
        count = sum(len(w.records) for w in writes.values())
        if count:
            self.stats.batches += 1
            self.stats.records_written += count
            if self._on_written is not None:
                self._on_written(count)
            if self._on_commit is not None:
                self._on_commit(time.perf_counter() - started)
        for write in batch:
            if not write.future.done():
                write.future.set_result(write.result)
        applied.clear()  # durable: nothing to undo from here on
        # Still holding the CRDTs' locks, yield once: every caller resumes and
        # queues its fan-out before anything else (another node's next op) may
        # change these CRDTs, so subscribers get each CRDT's seqs in order.
        await asyncio.sleep(0)

    def _note_write(
        self,
        writes: dict[Key, _KeyWrite],
        key: Key,
        row: Row,
        records: list[Record],
        created: list[str],
    ) -> None:
        """Add ``records`` to the batch; a CRDT they create is counted in its
        namespace's usage now, not once written: the next apply() of this batch
        checks SERVICE_NAMESPACE_MAX_CRDTS against it (each creation of a batch
        saw the figure of before the batch, and all of them passed)."""
        write = writes.get(key)
        if write is None:
            write = writes[key] = _KeyWrite(row)
            if not (row.live and row.epoch == records[0]["epoch"]):
                ns = key[0]
                self._count_usage(ns, 1, 0)
                self._creating[ns] = self._creating.get(ns, 0) + 1
                created.append(ns)
        write.records.extend(records)

    async def _lock_and_read(
        self,
        conn: PgConn,
        keys: list[Key],
        held: dict[Key, tuple[str, int]],
        lock_cur: psycopg.AsyncCursor[Any],
    ) -> dict[Key, Row]:
        """Wait for the locks; bring the engine up to every row (one round trip:
        the ops other nodes committed are read in the same flush, once locked)."""
        follower = self.follower
        assert follower is not None
        ahead_cur = await conn.execute(
            _OPS_AFTER_MANY,
            (
                [k[0] for k in held],
                [k[1] for k in held],
                [at[0] for at in held.values()],
                [at[1] for at in held.values()],
            ),
            prepare=False,
        )
        rows = {
            (ns, crdt_id): Row(epoch, seq, deleted)
            for ns, crdt_id, epoch, seq, deleted in await lock_cur.fetchall()
        }
        read_ahead: ReadAhead = {key: (at[0], at[1], []) for key, at in held.items()}
        for ns, crdt_id, seq, raw in await ahead_cur.fetchall():
            read_ahead[(ns, crdt_id)][2].append((seq, raw))
        reader = RowReader(conn, read_ahead)
        for key in keys:
            await follower.bring_up(reader, key, rows[key])
        return rows

    async def _write(self, conn: PgConn, writes: dict[Key, _KeyWrite]) -> psycopg.AsyncCursor[Any]:
        """Queue the batch's statements (its notifications with them) on the
        pipeline; the cursor that gets the newest gid."""
        follower = self.follower
        assert follower is not None
        ops: dict[str, list[Any]] = {
            "ns": [],
            "id": [],
            "epoch": [],
            "seq": [],
            "record": [],
            "writer": [],
            "tag": [],
        }
        moved: dict[str, list[Any]] = {
            "ns": [],
            "id": [],
            "type": [],
            "epoch": [],
            "seq": [],
            "was_epoch": [],
            "was_seq": [],
            "bytes": [],
        }
        sizes = self._sizes
        packed: list[bytes] = []
        new_lives: list[tuple[Key, str]] = []
        snapshots: list[tuple[Key, str, int, int, bytes]] = []
        for key, write in writes.items():
            records = write.records
            first, last = records[0], records[-1]
            epoch = first["epoch"]
            row = write.row
            base = row.seq if row.live and row.epoch == epoch else 0
            if first["seq"] != base + 1 or last["seq"] != base + len(records):
                raise RuntimeError(
                    f"{key[0]}/{key[1]}: engine numbered {first['seq']}..{last['seq']} after seq {base}"
                )
            for record in records:
                raw = pack(record)
                packed.append(raw)
                ops["ns"].append(key[0])
                ops["id"].append(key[1])
                ops["epoch"].append(epoch)
                ops["seq"].append(record["seq"])
                ops["record"].append(raw)
                writer, tag = attribution(record)
                ops["writer"].append(writer)
                ops["tag"].append(tag)
            moved["ns"].append(key[0])
            moved["id"].append(key[1])
            moved["type"].append(first["type"])
            moved["epoch"].append(epoch)
            moved["seq"].append(last["seq"])
            moved["was_epoch"].append(row.epoch if row.live else "")
            moved["was_seq"].append(row.seq if row.live else 0)
            moved["bytes"].append(sizes.pop(key, -1))
            # A creation was counted when it was applied (_note_write).
            self._count_usage(key[0], 0, sum(len(p) for p in packed[-len(records) :]))
            if row.epoch and row.epoch != epoch:
                new_lives.append((key, epoch))
            if last["seq"] // self._snapshot_every > base // self._snapshot_every:
                # The state at `last`, taken before any await changes the engine.
                snapshots.append((key, epoch, last["seq"], last["ts"], pack(follower.export(key))))
        params: dict[str, Any] = {
            **ops,
            **{f"row_{name}": values for name, values in moved.items()},
            "channel": self.channel,
            "notify": follower.announce([r for w in writes.values() for r in w.records], packed),
        }
        gid_cur = await conn.execute(_WRITE_BATCH, params)
        for key, epoch in new_lives:
            # A new life: what is left of older ones is of no use to anyone.
            await conn.execute(
                "DELETE FROM ops WHERE ns = %s AND id = %s AND epoch <> %s", (*key, epoch)
            )
            await conn.execute(
                "DELETE FROM checkpoints WHERE ns = %s AND id = %s AND epoch <> %s", (*key, epoch)
            )
        for key, epoch, seq, ts, entry in snapshots:
            await self._write_snapshot(conn, key, epoch, seq, ts, entry)
        return gid_cur

    async def _write_snapshot(
        self, conn: PgConn, key: Key, epoch: str, seq: int, ts: int, entry: bytes
    ) -> None:
        await conn.execute(
            "INSERT INTO snapshots (ns, id, epoch, seq, entry) VALUES (%s, %s, %s, %s, %s) "
            "ON CONFLICT (ns, id) DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq, "
            "entry = excluded.entry",
            (*key, epoch, seq, entry),
        )
        await conn.execute(
            "INSERT INTO checkpoints (ns, id, epoch, seq, ts, entry)"
            " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (*key, epoch, seq, ts, entry),
        )
        # Retention: the newest checkpoint that still covers what is promised
        # becomes the oldest kept; the ops before it and older checkpoints go.
        retention = self.history_retention
        floor = seq - self._ops_retained  # replays to resuming subscribers need these
        cutoff = 2**62
        if retention.ops is not None:
            floor = min(floor, seq - retention.ops)
        else:
            cutoff = time.time_ns() // 1_000_000 - (retention.age_ms or 0)
        if floor <= 0:
            self.stats.snapshots += 1
            return
        cur = await conn.execute(
            "SELECT max(seq) FROM checkpoints WHERE ns = %s AND id = %s AND epoch = %s"
            " AND seq <= %s AND ts < %s",
            (*key, epoch, floor, cutoff),
        )
        row = await cur.fetchone()
        base = row[0] if row is not None else None
        if base is not None:
            await conn.execute(
                "DELETE FROM ops WHERE ns = %s AND id = %s AND epoch = %s AND seq <= %s",
                (*key, epoch, base),
            )
            await conn.execute(
                "DELETE FROM checkpoints WHERE ns = %s AND id = %s AND epoch = %s AND seq < %s",
                (*key, epoch, base),
            )
        self.stats.snapshots += 1

    async def _delete(self, ns: str, crdt_id: str) -> None:
        key = (ns, crdt_id)
        follower = self.follower
        if follower is None:
            raise StoreUnavailable("the database is unavailable")
        async with self.locks.hold(key):
            if not self.ready:
                raise StoreUnavailable("the database is unavailable")
            checking_out = True  # a failure until then is a busy pool (see _failed)
            try:
                async with (
                    self._connection() as conn,
                    self._ending_stalled_holders(conn),
                ):
                    checking_out = False
                    ended: str | None = None
                    async with conn.transaction():
                        cur = await conn.execute(
                            "SELECT epoch, seq, deleted FROM crdts"
                            " WHERE ns = %s AND id = %s FOR UPDATE",
                            key,
                        )
                        found = await cur.fetchone()
                        if found is not None and Row(*found).live:
                            ended = found[0]
                            await conn.execute(
                                "UPDATE crdts SET deleted = true WHERE ns = %s AND id = %s", key
                            )
                            await conn.execute("DELETE FROM ops WHERE ns = %s AND id = %s", key)
                            await conn.execute(
                                "DELETE FROM snapshots WHERE ns = %s AND id = %s", key
                            )
                            await conn.execute(
                                "DELETE FROM checkpoints WHERE ns = %s AND id = %s", key
                            )
                            payloads = follower.announce_deleted(key, ended)
                            await conn.execute(_NOTIFY, (self.channel, payloads))
            except Exception as exc:
                self.stats.failures += 1
                log.warning("delete of %s/%s failed: %s", ns, crdt_id, exc)
                if isinstance(exc, NETWORK_ERRORS) and not checking_out:
                    self._up = False
                follower.trouble()
                raise StoreUnavailable("the database is unavailable") from None
            follower.ended(key)
            # One CRDT fewer: read again at the next usage(). Until then the
            # figure stays as it was (forgetting it let the creations already
            # past usage() be checked against none at all, and all passed),
            # and is not lowered here either: a read in flight may have seen
            # the delete already.
            self._read_usage_again(ns)

    # -- reads for the cluster layer ------------------------------------------------

    async def read_key(
        self, key: Key, then: Callable[[RowReader, Row | None], Awaitable[None]]
    ) -> None:
        """Read one CRDT's row consistently (repeatable read) and hand it to ``then``."""
        async with self._connection() as conn, conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cur = await conn.execute(_READ_ROW, key)
            found = await cur.fetchone()
            await then(RowReader(conn), Row(*found) if found is not None else None)

    async def read_rows(self, keys: Sequence[Key]) -> list[tuple[Key, Row]]:
        """The rows of these CRDTs that have one (a catch-up's). One index
        lookup per key (the arrays are joined with the primary key): about
        70 ms for 10,000 keys whatever the table's size. There is no way to
        read every row: a node must never pay for CRDTs it does not use."""
        if not keys:
            return []
        async with self._connection() as conn:
            cur = await conn.execute(
                _READ_ROWS, ([k[0] for k in keys], [k[1] for k in keys]), prepare=False
            )
            return [((ns, i), Row(e, s, d)) for ns, i, e, s, d in await cur.fetchall()]

    async def newest_gid(self, conn: PgConn) -> int:
        """The ops table's newest gid, read on ``conn`` (the cluster's probe)."""
        cur = await conn.execute("SELECT coalesce(max(gid), 0) FROM ops")
        found = await cur.fetchone()
        gid = int(found[0]) if found is not None else 0
        self.note_gid(gid)
        return gid
