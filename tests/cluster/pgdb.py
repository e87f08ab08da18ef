"""Throw-away PostgreSQL databases for tests, on the suite's own server.

The server is started on first use (``tests.pgserver``) and stopped when the
test process exits; ``SYNCD_TEST_PG`` (a URL without a database name) points
at an existing server instead. Every test module or test gets a database of
its own with a random name, so runs are isolated (also from runs in parallel)
and leave nothing behind: the database is dropped with its connections and
replication slots afterwards.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import time
from collections.abc import Iterator
from typing import Final

import psycopg
from psycopg import sql

from tests.pgserver import ThrowawayPostgres

DB_PREFIX: Final = "syncd_t_"
DROP_ATTEMPTS: Final = 20

_server: ThrowawayPostgres | None = None


def server_url() -> str:
    """The suite's PostgreSQL server (started here on first use) or ``SYNCD_TEST_PG``."""
    global _server
    external = os.environ.get("SYNCD_TEST_PG")
    if external:
        return external.rstrip("/")
    if _server is None:
        _server = ThrowawayPostgres().start()
        atexit.register(_server.stop)
    return _server.url


def database_url(name: str) -> str:
    return f"{server_url()}/{name}"


def admin_connect() -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(database_url("postgres"), autocommit=True, connect_timeout=5)


def create_database() -> str:
    name = DB_PREFIX + secrets.token_hex(6)
    with admin_connect() as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return name


def drop_database(name: str) -> None:
    """Drop ``name``: its sessions are ended and its (temporary) slots go with them."""
    for attempt in range(DROP_ATTEMPTS):
        try:
            with admin_connect() as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
                    " WHERE database = %s AND active_pid IS NOT NULL",
                    (name,),
                )
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                    " WHERE database = %s AND NOT active",
                    (name,),
                )
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
            return
        except psycopg.Error:
            if attempt == DROP_ATTEMPTS - 1:
                raise
            time.sleep(0.25)


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    """The name of a new empty database, dropped on exit."""
    name = create_database()
    try:
        yield name
    finally:
        drop_database(name)


def set_connections_allowed(name: str, allowed: bool) -> None:
    """Make ``name`` unreachable (every session ended, none accepted) or reachable again:
    a database outage that does not disturb other databases on the server."""
    with admin_connect() as conn:
        conn.execute(
            sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS {}").format(
                sql.Identifier(name), sql.SQL("true" if allowed else "false")
            )
        )
        if not allowed:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
