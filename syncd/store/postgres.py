"""PostgresStore: ops and snapshots in PostgreSQL; several nodes on one database form a cluster.

Theory of operation
-------------------
*Ordering.* Each CRDT has a row in ``crdts``. ``commit`` (the op path, called
by the service) takes that row's lock (inserting a placeholder when the CRDT
is new), brings this node's in-memory engine up to the row (replaying the ops
other nodes committed through ``service.apply_remote``, which also fans them
out to this node's subscribers), then runs ``apply()`` (the engine numbers the
ops), inserts the records, moves the row's ``seq`` and commits. Two nodes can
never hand out the same seq: the second waits for the row lock and then sees
the first one's ops. In this process, commits are also serialised per CRDT
by an asyncio lock, and everything that changes one CRDT's engine entry
(remote deltas, catch-up) holds the same lock, so subscribers see each CRDT's
seqs in order. Because the engine is caught up before ``apply()``, its
op_id window is current, so ``op_id`` idempotency holds across nodes and
restarts (the op_ids are in the records and snapshots).

*Failure.* An op is acknowledged after its transaction commits. If the
transaction fails after ``apply()`` ran, the engine is ahead of the database:
that CRDT is dropped from the engine (not announced) and reloaded from the
database as soon as it can be read, and the op answers 503. A failure before
``apply()`` (a dead pooled connection) is retried once on a fresh connection.

*Transport.* Right after its commit, a node sends ``NOTIFY`` with the records
(in a transaction of its own: see ``_notify``). A record too large for
a notification (8000 bytes) travels on the logical replication stream when
``SERVICE_WAL_CONNSTR`` is set (``pg_replication``), else the notification
carries a reference and receivers read the row. Receivers apply what
extends a CRDT they hold at the next seq right away; anything else (a gap, a
new life, a reference) makes them read that CRDT from the tables under its
lock, which also means a record arriving late by one path after the other
can never resurrect a deleted life.

*Faults.* A listener connection (LISTEN) doubles as the health monitor, with
a probe query every ``probe_interval_s``. When either fails, ``ready`` turns
False (readiness 503, ops 503), the pool is reset and the node reconnects
with backoff; once connected it compares every CRDT's (epoch, seq) with the
``crdts`` table and reloads those that differ, so deltas missed while
disconnected are caught up and fanned out. The same comparison runs every
``reconcile_interval_s`` while connected, for notifications lost after a
commit.

*Start-up.* ``open`` migrates the schema and loads, in one repeatable-read
transaction, each live CRDT's snapshot and the ops after it. The background
work (listener, replication consumer) starts when the application hands
over its snapshot source, i.e. once that state is loaded into the engine;
its first catch-up covers whatever committed in between.

``wal_last_seq`` is the ops table's global identity (``ops.gid``): the newest
this node committed or saw in its probe of the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgpack
import psycopg
from psycopg import sql

from syncd.crdt.engine import ApplyResult, GapError, export_entry
from syncd.errors import ApiError, unavailable
from syncd.store.base import Record, Recovered, SnapshotSource
from syncd.store.pg_notify import (
    SINGLE_RECORD_MAX,
    BadNotice,
    pack_deleted,
    pack_records,
    pack_reference,
    unpack,
    unpack_record,
)
from syncd.store.pg_pool import DEFAULT_POOL_SIZE, PgConn, PgPool
from syncd.store.pg_replication import WalConsumer, slot_name
from syncd.store.pg_schema import current_schema, migrate

if TYPE_CHECKING:
    from syncd.app import App
    from syncd.config import Settings

__all__ = [
    "COMMIT_TIMEOUT_S",
    "OPEN_TIMEOUT_S",
    "OPS_RETAINED",
    "OPS_SINCE_MAX",
    "PROBE_INTERVAL_S",
    "RECONCILE_INTERVAL_S",
    "SNAPSHOT_EVERY_OPS",
    "PgStats",
    "PostgresStore",
]

log = logging.getLogger("syncd.store.postgres")

Key = tuple[str, str]

SNAPSHOT_EVERY_OPS: Final = 500
"""A CRDT's snapshot entry is rewritten when its seq crosses a multiple of this:
start-up replays at most this many ops per CRDT after its snapshot."""

OPS_RETAINED: Final = 1000
"""Ops kept behind a CRDT's newest snapshot (older ones are deleted when it is
written), for ``?since=`` replays and for nodes that fell a little behind."""

OPS_SINCE_MAX: Final = 10_000
"""A replay longer than this is not read; the subscriber gets a snapshot."""

OPEN_TIMEOUT_S: Final = 30.0
"""How long start-up keeps trying to reach PostgreSQL before giving up."""

COMMIT_TIMEOUT_S: Final = 10.0
"""The longest a commit may take (waiting for another node's row lock
included) before it is abandoned and answered 503."""

PROBE_INTERVAL_S: Final = 1.0
"""How often an idle node checks that PostgreSQL still answers."""

PROBE_TIMEOUT_S: Final = 3.0
"""A probe slower than this counts as the database being unreachable."""

RECONCILE_INTERVAL_S: Final = 30.0
"""How often a connected node compares every CRDT with the crdts table anyway:
the bound on how long a notification lost after a commit (its sender died
between commit and NOTIFY) can leave a CRDT that nobody writes behind."""

LISTEN_TICK_S: Final = 0.25
"""The listener looks up from its notifications this often (probe, trouble)."""

RECONNECT_MIN_S: Final = 0.1
RECONNECT_MAX_S: Final = 2.0
"""Backoff between reconnect attempts while PostgreSQL is unreachable."""

_NETWORK_ERRORS = (psycopg.OperationalError, OSError, TimeoutError)


@dataclass
class PgStats:
    """Counters for tests, benchmarks and diagnostics."""

    commits: int = 0
    commit_failures: int = 0
    notices: int = 0
    """Notifications from other nodes handled."""
    wal_records: int = 0
    """Records that arrived on the replication stream."""
    syncs: int = 0
    """CRDTs read from the tables outside a commit: to fill a gap, verify a new
    life, follow a reference or catch up."""
    catch_ups: int = 0
    snapshots_written: int = 0


@dataclass(frozen=True, slots=True)
class _Row:
    epoch: str
    seq: int
    deleted: bool

    @property
    def live(self) -> bool:
        return not self.deleted and self.seq > 0


# What a node learned about one CRDT from elsewhere, queued behind its lock.
_Item = tuple[Any, ...]
_SYNC: Final[_Item] = ("sync",)


class _KeyedLocks:
    """An asyncio.Lock per key, forgotten when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[Key, tuple[asyncio.Lock, int]] = {}

    def busy(self, key: Key) -> bool:
        return key in self._locks

    @contextlib.asynccontextmanager
    async def hold(self, key: Key) -> AsyncIterator[None]:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _unpack(raw: bytes) -> Any:
    return msgpack.unpackb(raw, raw=False, strict_map_key=False)


_LOCK_ROW: Final = (
    "INSERT INTO crdts (ns, id, type, epoch, seq, deleted) VALUES (%s, %s, '', '', 0, true) "
    "ON CONFLICT (ns, id) DO UPDATE SET seq = crdts.seq "
    "RETURNING epoch, seq, deleted"
)
_READ_ROW: Final = "SELECT epoch, seq, deleted FROM crdts WHERE ns = %s AND id = %s"
_OPS_AFTER: Final = (
    "SELECT record FROM ops WHERE ns = %s AND id = %s AND epoch = %s AND seq > %s ORDER BY seq"
)
# Insert the records and move the row in one statement; the newest gid back.
_WRITE_OPS: Final = (
    "WITH ins AS (INSERT INTO ops (ns, id, epoch, seq, record) "
    "SELECT %(ns)s, %(id)s, %(epoch)s, s, r FROM unnest(%(seqs)s::bigint[], %(records)s::bytea[])"
    " AS t(s, r) RETURNING gid), "
    "upd AS (UPDATE crdts SET type = %(type)s, epoch = %(epoch)s, seq = %(seq)s, deleted = false"
    " WHERE ns = %(ns)s AND id = %(id)s) "
    "SELECT max(gid) FROM ins"
)


class PostgresStore:
    def __init__(
        self,
        settings: Settings,
        app: App,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        snapshot_every: int = SNAPSHOT_EVERY_OPS,
        ops_retained: int = OPS_RETAINED,
        open_timeout_s: float = OPEN_TIMEOUT_S,
        commit_timeout_s: float = COMMIT_TIMEOUT_S,
        probe_interval_s: float = PROBE_INTERVAL_S,
        reconcile_interval_s: float = RECONCILE_INTERVAL_S,
    ) -> None:
        if not settings.database_url:
            raise ValueError("PostgresStore needs DATABASE_URL")
        if snapshot_every < 1 or ops_retained < 0:
            raise ValueError("snapshot_every must be >= 1 and ops_retained >= 0")
        self._settings = settings
        self._app = app
        self._node = settings.node_id
        # Notifications name their sender; a per-process suffix keeps two
        # processes that share a SERVICE_NODE_ID (a misconfiguration, or a
        # restart racing the old process) from ignoring each other.
        self._sender = f"{settings.node_id}.{secrets.token_hex(3)}"
        self._pool = PgPool(settings.database_url, pool_size)
        self._snapshot_every = snapshot_every
        self._ops_retained = ops_retained
        self._open_timeout = open_timeout_s
        self._commit_timeout = commit_timeout_s
        self._probe_interval = probe_interval_s
        self._reconcile_interval = reconcile_interval_s
        self._wal_enabled = settings.wal_connstr is not None
        self._schema = ""
        self._channel = ""
        self._up = False
        self._opened = False
        self._closed = False
        self._locks = _KeyedLocks()
        self._pending: dict[Key, deque[_Item]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._supervisor: asyncio.Task[None] | None = None
        self._catching_up: asyncio.Task[None] | None = None
        self._catch_up_again = False
        self._trouble = asyncio.Event()
        self._wal: WalConsumer | None = None
        self._source: SnapshotSource | None = None
        self._last_gid = 0
        self._quiet: dict[Key, tuple[str, int]] = {}
        """CRDTs dropped after a failed commit: (epoch, seq) their subscribers have seen."""
        self.stats = PgStats()

    # -- the Store protocol ---------------------------------------------------

    @property
    def ready(self) -> bool:
        return self._up and not self._closed

    @property
    def wal_last_seq(self) -> int:
        return self._last_gid

    @property
    def channel(self) -> str:
        """The NOTIFY channel of this deployment (per database and schema)."""
        return self._channel

    @property
    def wal_streaming(self) -> bool:
        return self._wal is not None and self._wal.streaming

    async def open(self) -> Recovered:
        deadline = time.monotonic() + self._open_timeout
        delay = RECONNECT_MIN_S
        while True:
            try:
                async with self._pool.connection() as conn:
                    self._schema = await current_schema(conn)
                    await migrate(
                        conn,
                        publication=self._settings.wal_pub if self._wal_enabled else None,
                    )
                recovered = await self._load_all()
                break
            except _NETWORK_ERRORS as exc:
                if time.monotonic() + delay > deadline:
                    raise
                log.warning(
                    "PostgreSQL unreachable (%s); retrying in %.1fs", str(exc).strip(), delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX_S)
        # Channel names are identifiers (at most 63 bytes); one per schema.
        self._channel = f"syncd:{self._schema}"[:63]
        self._opened = True
        self._up = True
        log.info(
            "PostgreSQL store open (schema %s, node %s): %d snapshots, %d ops to replay",
            self._schema,
            self._node,
            len(recovered.entries),
            len(recovered.records),
        )
        return recovered

    def set_snapshot_source(self, source: SnapshotSource) -> None:
        # The application calls this right after loading what open() returned:
        # from now on remote deltas may be applied to its engine.
        self._source = source
        if self._opened and self._supervisor is None and not self._closed:
            self._supervisor = asyncio.get_running_loop().create_task(self._supervise())
            if self._wal_enabled:
                self._start_wal()

    async def reload(self) -> Recovered:
        """Everything the database holds, for the service's rebuild after a failure."""
        return await self._load_all()

    async def append(self, records: Sequence[Record]) -> None:
        """Deletes (op records go through :meth:`commit`)."""
        for record in records:
            if record.get("kind") != "deleted":
                raise ValueError("PostgresStore.append takes deleted records; ops use commit()")
            await self._delete(record["ns"], record["id"])

    async def ops_since(self, ns: str, crdt_id: str, epoch: str, since: int) -> list[Record] | None:
        if not self.ready:
            return None
        try:
            async with asyncio.timeout(self._commit_timeout), self._pool.connection() as conn:
                cur = await conn.execute(
                    _OPS_AFTER + " LIMIT %s", (ns, crdt_id, epoch, since, OPS_SINCE_MAX + 1)
                )
                rows = await cur.fetchall()
        except (psycopg.Error, OSError, TimeoutError) as exc:
            log.warning("ops_since %s/%s: %s", ns, crdt_id, exc)
            return None
        if not rows or len(rows) > OPS_SINCE_MAX:
            return None
        records = [_unpack(raw) for (raw,) in rows]
        if records[0]["seq"] != since + 1:
            return None  # pruned behind a snapshot
        return records

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._up = False
        tasks = [t for t in (self._supervisor, self._catching_up, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        if self._wal is not None:
            await asyncio.to_thread(self._wal.stop)
        await self._pool.close()

    # -- the op path ------------------------------------------------------------

    async def commit(self, ns: str, crdt_id: str, apply: Callable[[], ApplyResult]) -> ApplyResult:
        """Order, apply and persist one request's ops on one CRDT (see the module doc)."""
        key = (ns, crdt_id)
        async with self._locks.hold(key):
            # The row as it was when apply() ran (None: not yet): what the
            # subscribers have seen of this CRDT.
            applied: list[_Row | None] = [None]
            for attempt in (1, 2):
                if not self.ready:
                    raise unavailable("the database is unavailable")
                try:
                    async with (
                        asyncio.timeout(self._commit_timeout),
                        self._pool.connection() as conn,
                    ):
                        return await self._commit_on(conn, key, apply, applied)
                except ApiError:
                    raise
                except asyncio.CancelledError as exc:
                    if applied[0] is not None:
                        # Cancelled between apply() and the end of the commit:
                        # memory may be ahead; the database decides.
                        self._commit_failed(key, applied[0], exc)
                    raise
                except Exception as exc:
                    if attempt == 1 and applied[0] is None and isinstance(exc, _NETWORK_ERRORS):
                        # Dead pooled connections (the server restarted): nothing
                        # was applied, so try again on a fresh one.
                        await self._pool.reset()
                        continue
                    self._commit_failed(key, applied[0], exc)
                    raise unavailable("the database is unavailable") from None
        raise AssertionError("unreachable")

    async def _commit_on(
        self, conn: PgConn, key: Key, apply: Callable[[], ApplyResult], applied: list[_Row | None]
    ) -> ApplyResult:
        ns, crdt_id = key
        result: ApplyResult | None = None
        gid_cur: psycopg.AsyncCursor[Any] | None = None
        async with conn.pipeline(), conn.transaction() as tx:
            cur = await conn.execute(_LOCK_ROW, key)
            found = await cur.fetchone()
            assert found is not None
            row = _Row(*found)
            await self._sync_engine(conn, key, row)
            applied[0] = row
            result = apply()
            records = result.records
            if not records:
                raise psycopg.Rollback(tx)  # every op was an op_id repeat: nothing to write
            first, last = records[0], records[-1]
            epoch = first["epoch"]
            base = row.seq if row.live and row.epoch == epoch else 0
            if first["seq"] != base + 1 or last["seq"] != base + len(records):
                raise RuntimeError(
                    f"{ns}/{crdt_id}: engine numbered {first['seq']}..{last['seq']} after seq {base}"
                )
            packed = [_pack(r) for r in records]
            snapshot = None
            if last["seq"] // self._snapshot_every > base // self._snapshot_every:
                entry = self._app.engine.get(ns, crdt_id)
                assert entry is not None
                snapshot = _pack(export_entry(entry))  # the state at `last`, before any await
            gid_cur = await conn.execute(
                _WRITE_OPS,
                {
                    "ns": ns,
                    "id": crdt_id,
                    "epoch": epoch,
                    "seqs": [r["seq"] for r in records],
                    "records": packed,
                    "type": first["type"],
                    "seq": last["seq"],
                },
            )
            if row.epoch and row.epoch != epoch:
                # A new life: what is left of older ones is of no use to anyone.
                await conn.execute(
                    "DELETE FROM ops WHERE ns = %s AND id = %s AND epoch <> %s",
                    (ns, crdt_id, epoch),
                )
            if snapshot is not None:
                await self._write_snapshot(conn, key, epoch, last["seq"], snapshot)
        if result.records:
            await self._notify(conn, self._payloads(key, result.records, packed))
        if gid_cur is not None:
            gid = await gid_cur.fetchone()
            if gid is not None and gid[0] is not None:
                self._last_gid = max(self._last_gid, int(gid[0]))
        assert result is not None
        if result.records:
            self.stats.commits += 1
            self._app.metrics.wal_entries_total.inc(len(result.records))
        return result

    async def _write_snapshot(
        self, conn: PgConn, key: Key, epoch: str, seq: int, entry: bytes
    ) -> None:
        ns, crdt_id = key
        await conn.execute(
            "INSERT INTO snapshots (ns, id, epoch, seq, entry) VALUES (%s, %s, %s, %s, %s) "
            "ON CONFLICT (ns, id) DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq, "
            "entry = excluded.entry",
            (ns, crdt_id, epoch, seq, entry),
        )
        keep_after = seq - self._ops_retained
        if keep_after > 0:
            await conn.execute(
                "DELETE FROM ops WHERE ns = %s AND id = %s AND epoch = %s AND seq <= %s",
                (ns, crdt_id, epoch, keep_after),
            )
        self.stats.snapshots_written += 1

    def _payloads(self, key: Key, records: list[Record], packed: list[bytes]) -> list[str]:
        payloads, too_large = pack_records(self._sender, packed)
        if not self._wal_enabled:
            # Without the replication stream, receivers read large ones from the table.
            for index in too_large:
                r = records[index]
                payloads.append(pack_reference(self._sender, key[0], key[1], r["epoch"], r["seq"]))
        return payloads

    async def _notify(self, conn: PgConn, payloads: list[str]) -> None:
        """Announce committed changes, each payload its own tiny transaction.

        Not inside the data transaction: PostgreSQL holds a database-wide lock
        from a notifying transaction's pre-commit until its commit is flushed,
        which would serialise every commit's fsync (no group commit). Sent after
        the commit, the notification costs one round trip and no fsync. If it
        is lost (the node dies in between, the connection breaks), the op is
        still durable and acknowledged; other nodes pick it up when they next
        touch that CRDT or at their periodic reconcile.
        """
        try:
            async with conn.pipeline():
                for payload in payloads:
                    await conn.execute("SELECT pg_notify(%s, %s)", (self._channel, payload))
        except (psycopg.Error, OSError) as exc:
            log.warning("NOTIFY after a commit failed: %s", str(exc).strip())
            self._trouble.set()

    def _commit_failed(self, key: Key, applied: _Row | None, exc: BaseException) -> None:
        self.stats.commit_failures += 1
        log.warning(
            "commit on %s/%s failed: %s", key[0], key[1], str(exc).strip() or type(exc).__name__
        )
        if applied is not None:
            # Memory is ahead of the database: forget this CRDT (unannounced:
            # subscribers never saw the failed op) and read it back, quietly
            # up to what they did see.
            self._app.engine.delete(*key)
            if applied.live:
                self._quiet[key] = (applied.epoch, applied.seq)
            self._enqueue(key, _SYNC)
        if isinstance(exc, _NETWORK_ERRORS):
            self._up = False
        self._trouble.set()

    async def _delete(self, ns: str, crdt_id: str) -> None:
        key = (ns, crdt_id)
        async with self._locks.hold(key):
            if not self.ready:
                raise unavailable("the database is unavailable")
            try:
                async with asyncio.timeout(self._commit_timeout), self._pool.connection() as conn:
                    ended: str | None = None
                    async with conn.transaction():
                        cur = await conn.execute(
                            "SELECT epoch, seq, deleted FROM crdts"
                            " WHERE ns = %s AND id = %s FOR UPDATE",
                            key,
                        )
                        found = await cur.fetchone()
                        if found is not None and _Row(*found).live:
                            ended = found[0]
                            await conn.execute(
                                "UPDATE crdts SET deleted = true WHERE ns = %s AND id = %s", key
                            )
                            await conn.execute("DELETE FROM ops WHERE ns = %s AND id = %s", key)
                            await conn.execute(
                                "DELETE FROM snapshots WHERE ns = %s AND id = %s", key
                            )
                    if ended is not None:
                        await self._notify(conn, [pack_deleted(self._sender, ns, crdt_id, ended)])
            except Exception as exc:
                self._commit_failed(key, None, exc)
                raise unavailable("the database is unavailable") from None
            # A catch-up waiting for this lock may have loaded the CRDT back
            # after the service dropped it; the database now says it is gone.
            self._app.engine.delete(ns, crdt_id)

    # -- bringing the engine up to the database -------------------------------

    async def _sync_engine(self, conn: PgConn, key: Key, row: _Row | None) -> None:
        await self._bring_up(conn, key, row)
        self._quiet.pop(key, None)

    async def _bring_up(self, conn: PgConn, key: Key, row: _Row | None) -> None:
        """Make this CRDT's engine entry equal the database row (caller holds its lock).

        Every change goes through the service, so subscribers see it: ended
        lives as ``deleted``, ops in seq order, a snapshot delta where ops
        were pruned.
        """
        ns, crdt_id = key
        app = self._app
        quiet_epoch, quiet_seq = self._quiet.get(key, ("", 0))
        entry = app.engine.get(ns, crdt_id)
        live = row is not None and row.live
        if entry is not None and row is not None and live and entry.epoch == row.epoch:
            if entry.seq == row.seq:
                return
            if entry.seq > row.seq:
                # Memory ahead of the database: only a lost commit does that.
                log.warning(
                    "%s/%s: memory at seq %d, database at %d; reloading",
                    ns,
                    crdt_id,
                    entry.seq,
                    row.seq,
                )
                app.engine.delete(ns, crdt_id)
                entry = None
        elif entry is not None:
            app.service.apply_remote({"kind": "deleted", "ns": ns, "id": crdt_id})
            entry = None
        if not live:
            return
        assert row is not None
        have = entry.seq if entry is not None else 0
        cur = await conn.execute(_OPS_AFTER, (ns, crdt_id, row.epoch, have))
        records = [_unpack(raw) for (raw,) in await cur.fetchall()]
        if not records or records[0]["seq"] != have + 1:
            cur = await conn.execute(
                "SELECT entry FROM snapshots WHERE ns = %s AND id = %s AND epoch = %s",
                (ns, crdt_id, row.epoch),
            )
            found = await cur.fetchone()
            snapshot = _unpack(found[0]) if found is not None else None
            if snapshot is None or snapshot["seq"] <= have:
                raise RuntimeError(
                    f"{ns}/{crdt_id}: ops after seq {have} are missing and no snapshot covers them"
                )
            app.engine.import_entry(snapshot)
            if snapshot["epoch"] != quiet_epoch or snapshot["seq"] > quiet_seq:
                app.service.publish_soon(app.engine.snapshot_delta(ns, crdt_id))
            records = [r for r in records if r["seq"] > snapshot["seq"]]
        for record in records:
            if record["epoch"] == quiet_epoch and record["seq"] <= quiet_seq:
                app.engine.replay(record)  # its subscribers have it already
            else:
                app.service.apply_remote(record)

    async def _sync_key(self, key: Key) -> None:
        """Read one CRDT (consistently) and bring the engine to it; caller holds its lock."""
        self.stats.syncs += 1
        async with (
            asyncio.timeout(self._commit_timeout),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cur = await conn.execute(_READ_ROW, key)
            found = await cur.fetchone()
            await self._sync_engine(conn, key, _Row(*found) if found is not None else None)

    def _try_apply(self, key: Key, item: _Item) -> bool:
        """Apply what needs no database read; False when the tables must decide."""
        entry = self._app.engine.get(*key)
        kind = item[0]
        if kind == "op":
            record = item[1]
            if entry is None or entry.epoch != record["epoch"]:
                return False  # a new life, or one that may have ended: ask the table
            seq = record["seq"]
            if seq <= entry.seq:
                return True
            if seq != entry.seq + 1:
                return False
            try:
                self._app.service.apply_remote(record)
            except (GapError, ValueError, KeyError) as exc:
                log.warning(
                    "%s/%s: remote record not applied (%s); reading the table", key[0], key[1], exc
                )
                return False
            return True
        if kind == "del":
            if entry is None:
                return True
            if entry.epoch != item[1]:
                return False
            self._app.service.apply_remote({"kind": "deleted", "ns": key[0], "id": key[1]})
            return True
        if kind == "ref":
            return entry is not None and entry.epoch == item[1] and entry.seq >= item[2]
        return False

    def _offer(self, key: Key, item: _Item) -> None:
        """Something another node did: apply it now if nothing is in the way, else queue it."""
        if key not in self._pending and not self._locks.busy(key) and self._try_apply(key, item):
            return
        self._enqueue(key, item)

    def _enqueue(self, key: Key, item: _Item) -> None:
        queue = self._pending.get(key)
        if queue is None:
            queue = self._pending[key] = deque()
            self._spawn(self._drain(key))
        queue.append(item)

    async def _drain(self, key: Key) -> None:
        try:
            async with self._locks.hold(key):
                queue = self._pending[key]
                while queue:
                    if not self._try_apply(key, queue[0]):
                        # After this the engine equals the table, which already
                        # holds whatever this item announced (or its end).
                        await self._sync_key(key)
                    queue.popleft()
        except Exception as exc:
            if not self._closed:
                log.warning("reading %s/%s from the database failed: %s", key[0], key[1], exc)
                self._trouble.set()  # the catch-up after the next good probe covers it
        finally:
            self._pending.pop(key, None)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- messages from other nodes ----------------------------------------------

    def _on_notify(self, payload: str) -> None:
        try:
            notice = unpack(payload)
        except BadNotice as exc:
            log.warning("ignoring a notification on %s: %s", self._channel, exc)
            return
        if notice.node == self._sender:
            return
        self.stats.notices += 1
        try:
            if notice.kind == "r":
                for record in notice.records:
                    self._offer((record["ns"], record["id"]), ("op", record))
            elif notice.kind == "del":
                self._offer((notice.ns, notice.id), ("del", notice.epoch))
            else:
                self._offer((notice.ns, notice.id), ("ref", notice.epoch, notice.seq))
        except Exception:
            # A record this node cannot apply must not pass for a lost
            # connection (the listener would reconnect in a loop).
            log.exception("applying a notification from %s failed", notice.node)

    def _on_wal_record(self, raw: bytes) -> None:
        if self._closed:
            return
        try:
            record = unpack_record(raw)
        except BadNotice as exc:
            log.warning("ignoring a replicated row: %s", exc)
            return
        self.stats.wal_records += 1
        try:
            self._offer((record["ns"], record["id"]), ("op", record))
        except Exception:
            log.exception("applying a replicated record failed")

    def _start_wal(self) -> None:
        loop = asyncio.get_running_loop()
        connstr = self._settings.wal_connstr
        assert connstr is not None

        def to_loop(callback: Callable[..., None], *args: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed under us
                loop.call_soon_threadsafe(callback, *args)

        self._wal = WalConsumer(
            connstr,
            slot=slot_name(self._settings.wal_slot, self._node),
            publication=self._settings.wal_pub,
            schema=self._schema,
            on_record=lambda raw: to_loop(self._on_wal_record, raw),
            on_started=lambda: to_loop(self._request_catch_up),
            min_record_bytes=SINGLE_RECORD_MAX,
        )
        self._wal.start()

    # -- health, reconnects and catch-up ------------------------------------------

    async def _supervise(self) -> None:
        delay = RECONNECT_MIN_S
        while not self._closed:
            listener: PgConn | None = None
            try:
                listener = await self._pool.connect()
                await listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                await self._probe(listener)
                if not self._up:
                    log.warning("PostgreSQL reachable again; catching up")
                self._up = True
                self._trouble.clear()
                self._request_catch_up()
                delay = RECONNECT_MIN_S
                next_probe = time.monotonic() + self._probe_interval
                next_reconcile = time.monotonic() + self._reconcile_interval
                while not self._closed:
                    async for notify in listener.notifies(timeout=LISTEN_TICK_S):
                        self._on_notify(notify.payload)
                    trouble = self._trouble.is_set()
                    if trouble or time.monotonic() >= next_probe:
                        self._trouble.clear()
                        await self._probe(listener)
                        next_probe = time.monotonic() + self._probe_interval
                        if trouble:
                            self._up = True
                            self._request_catch_up()
                    if time.monotonic() >= next_reconcile:
                        next_reconcile = time.monotonic() + self._reconcile_interval
                        self._request_catch_up()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._closed:
                    break
                if self._up:
                    log.error(
                        "lost PostgreSQL (%s): refusing writes until it is back", str(exc).strip()
                    )
                self._up = False
                await self._pool.reset()
            finally:
                if listener is not None:
                    with contextlib.suppress(Exception):
                        await listener.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX_S)

    async def _probe(self, conn: PgConn) -> None:
        # On the listener's connection (free between notifies() rounds): a busy
        # pool must not look like an unreachable server.
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            cur = await conn.execute("SELECT coalesce(max(gid), 0) FROM ops")
            found = await cur.fetchone()
        if found is not None:
            self._last_gid = max(self._last_gid, int(found[0]))

    async def _load_all(self) -> Recovered:
        """Every live CRDT's snapshot entry and the ops after it, read consistently."""
        recovered = Recovered()
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cur = await conn.execute(
                "SELECT s.entry FROM snapshots s JOIN crdts c "
                "ON c.ns = s.ns AND c.id = s.id AND c.epoch = s.epoch WHERE NOT c.deleted"
            )
            recovered.entries = [_unpack(raw) for (raw,) in await cur.fetchall()]
            # A server-side cursor: the ops table may be far larger than one fetch.
            ops = conn.cursor(name="syncd_load")
            await ops.execute(
                "SELECT o.record FROM ops o "
                "JOIN crdts c ON c.ns = o.ns AND c.id = o.id AND c.epoch = o.epoch "
                "LEFT JOIN snapshots s ON s.ns = o.ns AND s.id = o.id AND s.epoch = o.epoch "
                "WHERE NOT c.deleted AND o.seq > coalesce(s.seq, 0) ORDER BY o.ns, o.id, o.seq"
            )
            records: list[Record] = []
            recovered.records = records
            async for (raw,) in ops:
                records.append(_unpack(raw))
            await ops.close()
            cur = await conn.execute("SELECT coalesce(max(gid), 0) FROM ops")
            found = await cur.fetchone()
            if found is not None:
                self._last_gid = max(self._last_gid, int(found[0]))
        return recovered

    def _request_catch_up(self) -> None:
        if self._closed:
            return
        if self._catching_up is not None and not self._catching_up.done():
            self._catch_up_again = True
            return
        self._catching_up = asyncio.get_running_loop().create_task(self._catch_up())

    async def _catch_up(self) -> None:
        """Compare every CRDT with the crdts table and reload those that differ."""
        while True:
            self._catch_up_again = False
            self.stats.catch_ups += 1
            try:
                async with asyncio.timeout(self._commit_timeout), self._pool.connection() as conn:
                    cur = await conn.execute("SELECT ns, id, epoch, seq, deleted FROM crdts")
                    rows = await cur.fetchall()
            except Exception as exc:
                log.warning("catch-up: %s", exc)
                self._trouble.set()
                return
            engine = self._app.engine
            behind = 0
            for ns, crdt_id, epoch, seq, deleted in rows:
                entry = engine.get(ns, crdt_id)
                live = not deleted and seq > 0
                if entry is None and not live:
                    continue
                if entry is not None and live and entry.epoch == epoch and entry.seq == seq:
                    continue
                behind += 1
                self._enqueue((ns, crdt_id), _SYNC)
            if behind:
                log.info("catch-up: %d CRDTs differ from the database; reloading them", behind)
            if not self._catch_up_again:
                return
