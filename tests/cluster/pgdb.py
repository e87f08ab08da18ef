"""Throw-away PostgreSQL databases for tests (the server on 127.0.0.1:5432).

Every test module or test gets a database of its own with a random name, so
runs are isolated (also from runs in parallel) and leave nothing behind: the
database is dropped with its connections and replication slots afterwards.
``SYNCD_TEST_PG`` overrides the server URL (without a database name).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Iterator
from typing import Final

import psycopg
from psycopg import sql

SERVER_URL: Final = os.environ.get("SYNCD_TEST_PG", "postgresql://root@127.0.0.1:5432")
DB_PREFIX: Final = "syncd_t_"
DROP_ATTEMPTS: Final = 20


def database_url(name: str) -> str:
    return f"{SERVER_URL}/{name}"


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
