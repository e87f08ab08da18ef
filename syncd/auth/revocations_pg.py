"""Revocations kept in PostgreSQL, and how every node of a cluster learns of them.

Tables (migration 3 in :mod:`syncd.store.pg_schema`): ``revocations``, one row
per (namespace, client), and ``revocations_version``, one row whose
``version`` every change increments in the same transaction.

**How other nodes learn of a change: a poll, not LISTEN/NOTIFY.** Each node
reads ``revocations_version`` every :data:`POLL_INTERVAL_S` on a connection of
its own, and re-reads the (small) table only when the version moved. Why a
poll:

- nothing can be missed. A notification sent while a node's listening
  connection is down (a restart of PostgreSQL, a network blip, the node
  itself paused) is lost, and the node would have to know to reload; a
  version read after any outage is simply different, so the node reloads;
- the bound holds by construction: a change is applied by every node within
  one interval plus a round trip (0.25 s + a few ms, against the 1 s promised),
  and the ended connections end at that moment;
- it is cheap: one primary-key read of a one-row table, four times a second
  per node, on an idle connection the node keeps for it (so the write pool,
  busy under load, cannot delay it); no LISTEN connection, no channel, no
  payload size limits, and nothing in the replicator changes.

The node that makes a change applies it at once: the write and the re-read
run under one lock with the poll, so what is applied is always a snapshot at
least as new as the last one (version and rows read in one transaction).

While the database is unreachable a node keeps enforcing the revocations it
last read, logs the outage once, reconnects with backoff, and reloads when it
is back; revoking and lifting answer 503 ``unavailable`` meanwhile. At start
(before the node serves) the first read is waited for as the store's open is
(:func:`syncd.store.pg_start.keep_trying`): retried with backoff and logged
while the database is away or too slow to answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Final, Protocol

import psycopg

from syncd.auth.revocations import MAX_REVOCATIONS_PER_NAMESPACE, Apply, Revocation, too_many
from syncd.errors import ApiError, unavailable
from syncd.store.pg_start import keep_trying
from syncd.store.postgres import NETWORK_ERRORS

if TYPE_CHECKING:
    from psycopg import AsyncConnection

    Conn = AsyncConnection[Any]

log = logging.getLogger("syncd.auth")

POLL_INTERVAL_S: Final = 0.25
"""How often each node reads the version. A change reaches every node within
this plus a round trip; 0.25 s keeps that well inside the 1 s promised
(docs/permissions.md#revoking-tokens) with room for a loaded node, at four
one-row reads a second."""

RECONNECT_MIN_S: Final = 0.25
RECONNECT_MAX_S: Final = 2.0
"""Backoff between attempts to reach the database again (as the replicator's)."""

SETTING: Final = "DATABASE_URL"
"""Where the store's pool, which this uses, gets its URL (named while waiting)."""

QUERY_TIMEOUT_S: Final = 5.0
"""A poll, a write or a reload that takes longer is abandoned: the write
answers 503, the poll reconnects."""

_VERSION: Final = "SELECT version FROM revocations_version"
_ROWS: Final = "SELECT ns, client_id, before_ms, revoked_at FROM revocations"
_BUMP: Final = "UPDATE revocations_version SET version = version + 1"
_LOCK: Final = "SELECT version FROM revocations_version FOR UPDATE"
_OTHERS: Final = "SELECT count(*) FROM revocations WHERE ns = %s AND client_id <> %s"
_UPSERT: Final = (
    "INSERT INTO revocations (ns, client_id, before_ms, revoked_at) VALUES (%s, %s, %s, %s)"
    " ON CONFLICT (ns, client_id) DO UPDATE"
    " SET before_ms = EXCLUDED.before_ms, revoked_at = EXCLUDED.revoked_at"
)
_DELETE: Final = "DELETE FROM revocations WHERE ns = %s AND client_id = %s"


class Connections(Protocol):
    """What this needs of the store's pool (``syncd.store.pg_pool.PgPool``)."""

    def connection(self) -> AbstractAsyncContextManager[Any]:
        """A pooled connection (autocommit)."""
        ...

    async def connect(self) -> Any:
        """A new connection outside the pool (autocommit)."""
        ...


class PgRevocationStore:
    def __init__(self, pool: Connections, *, poll_interval_s: float = POLL_INTERVAL_S) -> None:
        self._pool = pool
        self._poll_s = poll_interval_s
        self._apply: Apply | None = None
        self._version: int | None = None
        """The version last applied (None: nothing yet)."""
        self._lock = asyncio.Lock()
        self._conn: Conn | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.polls = 0
        """Version reads made (for tests)."""

    async def open(self, apply: Apply) -> None:
        """Read the table (the schema is migrated by the store's open), then
        poll for changes until :meth:`close`. While the database is away or
        does not answer the read is tried again, logged, for as long as it
        takes (the node does not serve without its revocations): a database
        that went away just after the store opened, or was slow, stopped the
        start."""
        self._apply = apply
        await keep_trying(
            self._first_read,
            setting=SETTING,
            errors=(psycopg.Error, OSError),
            transient=NETWORK_ERRORS,
        )
        self._task = asyncio.get_running_loop().create_task(self._poll())

    async def _first_read(self) -> None:
        try:
            async with (
                self._lock,
                asyncio.timeout(QUERY_TIMEOUT_S),
                self._pool.connection() as conn,
            ):
                await self._reload(conn)
        except TimeoutError:
            # As it is logged (a bare TimeoutError says nothing).
            raise TimeoutError(
                f"reading the revocations took more than {QUERY_TIMEOUT_S:g} s"
            ) from None

    async def put(self, revocation: Revocation) -> None:
        args = (
            revocation.namespace,
            revocation.client_id,
            revocation.before_ms,
            revocation.revoked_at,
        )
        await self._change(_UPSERT, args, limit=(revocation.namespace, revocation.client_id))

    async def delete(self, namespace: str, client_id: int) -> bool:
        return await self._change(_DELETE, (namespace, client_id))

    async def _change(
        self, statement: str, args: tuple[Any, ...], *, limit: tuple[str, int] | None = None
    ) -> bool:
        """``limit``: (namespace, client) whose new row must fit under
        MAX_REVOCATIONS_PER_NAMESPACE (ApiError 409 when it does not)."""
        async with self._lock:
            try:
                async with asyncio.timeout(QUERY_TIMEOUT_S), self._pool.connection() as conn:
                    async with conn.transaction():
                        # The version row first, in every change: the limit is
                        # counted under its lock, and a change that took the
                        # revocation's row first (a lift) while another took
                        # the version row first deadlocked with it.
                        await conn.execute(_LOCK)
                        if limit is not None:
                            await self._check_limit(conn, *limit)
                        cur = await conn.execute(statement, args)
                        changed: bool = cur.rowcount > 0
                        if changed:
                            await conn.execute(_BUMP)
                    if changed:
                        await self._reload(conn)
            except ApiError:
                raise
            except Exception as exc:
                log.warning("revocations: the database refused a change: %r", exc)
                raise unavailable("the revocation could not be stored") from None
            return changed

    @staticmethod
    async def _check_limit(conn: Conn, namespace: str, client_id: int) -> None:
        """The namespace's limit, counted in the database under the version
        row's lock (the caller holds it): every change takes that lock, so
        nodes count one after another and each sees what the last committed.
        The caller's check on its own table is not enough in a cluster: two
        nodes revoking at once both saw the last place free and both took it."""
        cur = await conn.execute(_OTHERS, (namespace, client_id))
        row = await cur.fetchone()
        if row is not None and int(row[0]) >= MAX_REVOCATIONS_PER_NAMESPACE:
            raise too_many(namespace)

    async def _reload(self, conn: Conn) -> None:
        """Version and rows in one snapshot; applied if the version moved."""
        async with conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur = await conn.execute(_VERSION)
            row = await cur.fetchone()
            version = int(row[0]) if row is not None else 0
            if version == self._version:
                return
            cur = await conn.execute(_ROWS)
            rows = await cur.fetchall()
        revocations = [Revocation(str(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in rows]
        self._version = version
        if self._apply is not None:
            self._apply(revocations)

    async def _poll(self) -> None:
        delay = RECONNECT_MIN_S
        down = False
        while not self._closed:
            try:
                conn = self._conn
                if conn is None:
                    async with asyncio.timeout(QUERY_TIMEOUT_S):
                        conn = self._conn = await self._pool.connect()
                async with asyncio.timeout(QUERY_TIMEOUT_S):
                    cur = await conn.execute(_VERSION)
                    row = await cur.fetchone()
                    self.polls += 1
                    if row is not None and int(row[0]) != self._version:
                        async with self._lock:
                            await self._reload(conn)
                if down:
                    log.info("revocations: the database is back; changes apply again")
                    down = False
                delay = RECONNECT_MIN_S
                await asyncio.sleep(self._poll_s)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not down:
                    log.warning(
                        "revocations: cannot read the database (%r); the last known"
                        " revocations stay in force until it is back",
                        exc,
                    )
                    down = True
                await self._drop_connection()
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX_S)

    async def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def close(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        async with self._lock:
            await self._drop_connection()
