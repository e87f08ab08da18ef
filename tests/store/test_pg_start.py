"""Reaching PostgreSQL at start (syncd/store/pg_start.py), with the errors a real
server and libpq give: what is waited for, what stops the start, and the line
that says why."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from syncd.store.pg_start import DatabaseSetupError, describe, keep_trying, permanent
from syncd.store.postgres import NETWORK_ERRORS, PostgresStore
from tests.cluster.pgdb import admin_connect, database_url, server_url
from tests.pgserver import free_port

pytestmark = pytest.mark.timeout(60)

PSYCOPG_ERRORS = (psycopg.Error, OSError)


async def connect(url: str) -> None:
    conn = await psycopg.AsyncConnection.connect(url, connect_timeout=3)
    await conn.close()


async def failure(url: str) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as caught:
        await connect(url)
    return caught.value


def refused_url() -> str:
    """A server address where nothing listens (the port was free a moment ago)."""
    return f"postgresql://syncd@127.0.0.1:{free_port()}/postgres"


async def test_a_missing_database_is_permanent_and_said_in_the_servers_words() -> None:
    exc = await failure(database_url("syncd_no_such_db"))
    assert exc.sqlstate is None  # libpq keeps no SQLSTATE for a refused connection
    assert permanent(exc)
    assert describe(exc) == 'database "syncd_no_such_db" does not exist'


async def test_an_unknown_role_is_permanent() -> None:
    url = database_url("postgres").replace("://syncd@", "://syncd_no_such_role@", 1)
    if url == database_url("postgres"):
        pytest.skip("SYNCD_TEST_PG names another user")
    exc = await failure(url)
    assert permanent(exc)
    assert describe(exc) == 'role "syncd_no_such_role" does not exist'


async def test_a_refused_connection_is_transient_and_one_line() -> None:
    url = refused_url()
    exc = await failure(url)
    assert isinstance(exc, NETWORK_ERRORS) and not permanent(exc)
    line = describe(exc)
    assert "\n" not in line and line.endswith("failed: Connection refused"), line


async def test_keep_trying_waits_out_transient_failures_then_succeeds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Two real refusals, then the real server: what a node starting before
    # its database sees.
    urls = iter([refused_url(), refused_url(), database_url("postgres")])
    attempts = 0

    async def attempt() -> int:
        nonlocal attempts
        attempts += 1
        await connect(next(urls))
        return attempts

    caplog.set_level("WARNING", logger="syncd.store.postgres")
    result = await keep_trying(
        attempt, setting="DATABASE_URL", errors=PSYCOPG_ERRORS, transient=NETWORK_ERRORS
    )
    assert result == 3
    waits = [r.getMessage() for r in caplog.records if "waiting for PostgreSQL" in r.getMessage()]
    assert len(waits) == 2
    assert all("(DATABASE_URL)" in w and "Connection refused" in w for w in waits), waits


async def test_keep_trying_stops_at_the_first_permanent_failure() -> None:
    attempts = 0

    async def attempt() -> None:
        nonlocal attempts
        attempts += 1
        await connect(database_url("syncd_no_such_db"))

    with pytest.raises(DatabaseSetupError) as caught:
        await keep_trying(
            attempt, setting="DATABASE_URL", errors=PSYCOPG_ERRORS, transient=NETWORK_ERRORS
        )
    assert attempts == 1
    assert str(caught.value) == 'DATABASE_URL: database "syncd_no_such_db" does not exist'


async def test_a_url_libpq_cannot_use_is_permanent() -> None:
    async def attempt() -> None:
        await connect(database_url("postgres") + "?no_such_parameter=1")

    with pytest.raises(DatabaseSetupError, match=r"^DATABASE_URL: invalid URI query parameter"):
        await keep_trying(
            attempt, setting="DATABASE_URL", errors=PSYCOPG_ERRORS, transient=NETWORK_ERRORS
        )


async def test_give_up_after_raises_the_last_transient_failure() -> None:
    async def attempt() -> None:
        await connect(refused_url())

    with pytest.raises(psycopg.OperationalError, match="Connection refused"):
        await keep_trying(
            attempt,
            setting="DATABASE_URL",
            errors=PSYCOPG_ERRORS,
            transient=NETWORK_ERRORS,
            give_up_after_s=0.3,
        )


@pytest.fixture
def unprivileged_url() -> Iterator[str]:
    """A role that may log in to a fresh database but create nothing in it
    (PostgreSQL 15 and later give PUBLIC no CREATE on the public schema)."""
    base = server_url()
    if "://syncd@" not in base:
        pytest.skip("SYNCD_TEST_PG names another user")
    role = "syncd_t_" + secrets.token_hex(4)
    name = "syncd_t_" + secrets.token_hex(6)
    with admin_connect() as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield f"{base.replace('://syncd@', f'://{role}@', 1)}/{name}"
    finally:
        with admin_connect() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


async def test_a_role_that_may_not_create_the_tables_is_permanent(unprivileged_url: str) -> None:
    """After connecting, errors carry a SQLSTATE: 42501 while migrating stops the start."""
    store = PostgresStore(unprivileged_url)
    with pytest.raises(DatabaseSetupError) as caught:
        await store.open()
    await store.close()
    assert caught.value.setting == "DATABASE_URL"
    assert caught.value.problem == "permission denied for schema public"
