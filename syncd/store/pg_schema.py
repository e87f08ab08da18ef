"""The PostgreSQL schema: ordered migrations recorded in ``schema_version``.

Tables (in the connection's current schema, so a ``search_path`` in the URL
isolates deployments that share one database):

- ``crdts``: one row per CRDT id, the current life: ``type``, ``epoch``,
  ``seq`` (the last assigned), ``deleted`` and ``bytes`` (its size for the
  quotas, -1 when not known). Its row lock orders writers
  across nodes: ``seq`` is assigned while it is held.
- ``ops``: every op record of every live CRDT (msgpack), keyed by
  ``(ns, id, epoch, seq)``; ``gid`` is a global identity used as the store's
  log sequence (``wal_last_seq``); ``writer`` and ``tag`` are the record's
  client id and attribution tag (``syncd.store.base.attribution``; 0 and 0
  for rows written before version 5).
- ``snapshots``: one entry map per CRDT (msgpack), written every N ops, so
  start-up loads a snapshot and only the ops after it.
- ``revocations`` and ``revocations_version``: revoked clients, and a
  counter every change increments, which each node polls
  (:mod:`syncd.auth.revocations_pg`).

Several nodes may start at once: migrations run inside one transaction that
holds a transaction-scoped advisory lock, so exactly one node applies each
version and the others see it applied. A node that finds the lock taken
waits for it and says so in its log, naming the session that holds it (a
node migrating, or one that stopped mid-way with its connection still open):
a start waiting in silence looks hung.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Final

from psycopg import sql

from syncd.store.pg_pool import PgConn

log = logging.getLogger("syncd.store.postgres")

# pg_advisory_xact_lock key serialising migrations of one database ("syncd").
SCHEMA_LOCK_KEY: Final = 0x73796E6364

SCHEMA_LOCK_POLL_S: Final = 0.25
"""How often a node that finds the schema lock taken tries it again (a
migration of an empty database takes a few ms)."""

SCHEMA_LOCK_LOG_S: Final = 10.0
"""How often a node still waiting for the schema lock logs who holds it."""

SCHEMA_LOCK_QUIET_S: Final = 1.0
"""How long a node waits for the schema lock before it says so: nodes
started together wait for the one migrating a few ms, which is no news (a
warning at every such start taught operators to ignore the line)."""

_HOLDER: Final = (
    "SELECT a.pid, a.application_name, a.state,"
    " extract(epoch FROM now() - a.xact_start)::bigint"
    " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
    " WHERE l.locktype = 'advisory' AND l.granted"
    " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND l.classid::bigint = %s AND l.objid::bigint = %s AND l.objsubid = 1"
)
"""The session holding the schema lock (a bigint key is classid:objid, objsubid 1)."""

Migration = tuple[int, tuple[str, ...]]

MIGRATIONS: Final[tuple[Migration, ...]] = (
    (
        1,
        (
            """CREATE TABLE crdts (
                ns text NOT NULL,
                id text NOT NULL,
                type text NOT NULL,
                epoch text NOT NULL,
                seq bigint NOT NULL,
                deleted boolean NOT NULL,
                PRIMARY KEY (ns, id)
            )""",
            """CREATE TABLE ops (
                gid bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
                ns text NOT NULL,
                id text NOT NULL,
                epoch text NOT NULL,
                seq bigint NOT NULL,
                record bytea NOT NULL,
                PRIMARY KEY (ns, id, epoch, seq)
            )""",
            """CREATE TABLE snapshots (
                ns text NOT NULL,
                id text NOT NULL,
                epoch text NOT NULL,
                seq bigint NOT NULL,
                entry bytea NOT NULL,
                PRIMARY KEY (ns, id)
            )""",
        ),
    ),
    (
        2,
        (
            # History: every snapshot a CRDT had, kept as retention asks; ts is
            # the time of the op at seq (what age retention compares).
            """CREATE TABLE checkpoints (
                ns text NOT NULL,
                id text NOT NULL,
                epoch text NOT NULL,
                seq bigint NOT NULL,
                ts bigint NOT NULL,
                entry bytea NOT NULL,
                PRIMARY KEY (ns, id, epoch, seq)
            )""",
            "INSERT INTO checkpoints SELECT ns, id, epoch, seq, 0, entry FROM snapshots",
        ),
    ),
    (
        3,
        (
            # Revocations (docs/permissions.md#revoking-tokens): tokens of
            # client_id in ns issued before before_ms are refused.
            """CREATE TABLE revocations (
                ns text NOT NULL,
                client_id bigint NOT NULL,
                before_ms bigint NOT NULL,
                revoked_at bigint NOT NULL,
                PRIMARY KEY (ns, client_id)
            )""",
            # One row; every change to revocations increments it in the same
            # transaction, so a node polls one value to know it must reload.
            """CREATE TABLE revocations_version (
                id boolean PRIMARY KEY DEFAULT true CHECK (id),
                version bigint NOT NULL
            )""",
            "INSERT INTO revocations_version (id, version) VALUES (true, 0)",
        ),
    ),
    (
        4,
        (
            # Quotas (syncd/quotas.py): each CRDT's size as its engine last
            # measured it; -1 for rows written before (measured at their next write).
            "ALTER TABLE crdts ADD COLUMN bytes bigint NOT NULL DEFAULT -1",
        ),
    ),
    (
        5,
        (
            # Revert (syncd/revert.py): each op's writer and attribution tag
            # (syncd.store.base.attribution), so that a revert decodes only the
            # records it needs of a long window. Rows written before say
            # nothing (tag 0): their records are decoded to know.
            "ALTER TABLE ops ADD COLUMN writer bigint NOT NULL DEFAULT 0,"
            " ADD COLUMN tag bigint NOT NULL DEFAULT 0",
        ),
    ),
)


class SchemaTooNewError(RuntimeError):
    """The database was migrated by a newer syncd than this one."""


class NoSchemaError(RuntimeError):
    """No schema of the connection's search_path exists: nowhere to make the tables."""


async def current_schema(conn: PgConn) -> str:
    cur = await conn.execute("SELECT current_schema(), current_setting('search_path')")
    row = await cur.fetchone()
    if row is None or row[0] is None:
        # current_schema() is null when none of search_path's schemas exists
        # (a URL's options=-csearch_path=... naming one not created yet).
        path = row[1] if row is not None else ""
        raise NoSchemaError(
            f"no schema of its search_path ({path}) exists:"
            " create it (CREATE SCHEMA) or name one that exists"
        )
    return str(row[0])


async def migrate(
    conn: PgConn,
    migrations: Sequence[Migration] = MIGRATIONS,
    *,
    publication: str | None = None,
) -> int:
    """Bring the schema to the newest version; the version it is at afterwards.

    With ``publication``, also create that publication (for the ``ops`` table's
    inserts, which is all the replication consumer reads) when it is missing.
    """
    ordered = sorted(migrations)
    versions = [version for version, _ in ordered]
    if len(set(versions)) != len(versions) or any(v < 1 for v in versions):
        raise ValueError("migration versions must be distinct positive integers")
    known = versions[-1] if versions else 0
    async with conn.transaction():
        await _lock_schema(conn)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            " version integer PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        cur = await conn.execute("SELECT coalesce(max(version), 0) FROM schema_version")
        row = await cur.fetchone()
        current = int(row[0]) if row is not None else 0
        if current > known:
            raise SchemaTooNewError(
                f"the database schema is at version {current}; this syncd knows up to {known}"
            )
        for version, statements in ordered:
            if version <= current:
                continue
            for statement in statements:
                await conn.execute(statement)
            await conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
            current = version
        if publication is not None:
            await _ensure_publication(conn, publication)
    return current


async def _lock_schema(conn: PgConn) -> None:
    """Take the schema lock for the caller's transaction, waiting as long as
    it is held, and logging who holds it meanwhile (every
    :data:`SCHEMA_LOCK_LOG_S`)."""
    logged: float | None = None
    quiet_until = time.monotonic() + SCHEMA_LOCK_QUIET_S
    while True:
        cur = await conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (SCHEMA_LOCK_KEY,))
        row = await cur.fetchone()
        if row is not None and row[0]:
            if logged is not None:
                log.info("schema lock free again: going on")
            return
        now = time.monotonic()
        if now >= quiet_until and (logged is None or now - logged >= SCHEMA_LOCK_LOG_S):
            log.warning(
                "waiting for the schema lock (another node migrating the database?): %s",
                await _holder(conn),
            )
            logged = time.monotonic()
        await asyncio.sleep(SCHEMA_LOCK_POLL_S)


async def _holder(conn: PgConn) -> str:
    cur = await conn.execute(_HOLDER, (SCHEMA_LOCK_KEY >> 32, SCHEMA_LOCK_KEY & 0xFFFFFFFF))
    row = await cur.fetchone()
    if row is None:
        return "released meanwhile"
    pid, application, state, seconds = row
    return (
        f"held by PostgreSQL session {pid} (application_name {application or ''!r},"
        f" {state}, its transaction open for {seconds} s)"
    )


async def _ensure_publication(conn: PgConn, name: str) -> None:
    schema = await current_schema(conn)
    table = sql.Identifier(schema, "ops")
    cur = await conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,))
    if await cur.fetchone() is None:
        # Only the ops table: the consumer applies op records, and streaming the
        # snapshots table would send every (large) state to every node.
        await conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {} WITH (publish = 'insert')").format(
                sql.Identifier(name), table
            )
        )
        return
    cur = await conn.execute(
        "SELECT 1 FROM pg_publication_tables"
        " WHERE pubname = %s AND schemaname = %s AND tablename = 'ops'",
        (name, schema),
    )
    if await cur.fetchone() is None:
        # A publication of that name made for something else (or for another
        # schema's deployment): ours must be in it too, or nothing streams.
        await conn.execute(
            sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(sql.Identifier(name), table)
        )
