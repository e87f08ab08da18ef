"""PgPool (psycopg_pool underneath) against the real PostgreSQL: the guarantees the store relies on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest

from syncd.store.pg_pool import PgConn, PgPool
from tests.cluster.pgdb import database_url, fresh_database

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(scope="module")
def pg_db() -> Iterator[str]:
    with fresh_database() as name:
        yield name


@pytest.fixture
async def pool(pg_db: str) -> AsyncIterator[PgPool]:
    pool = PgPool(database_url(pg_db), 2)
    yield pool
    await pool.close()


async def pid(conn: PgConn) -> int:
    cur = await conn.execute("SELECT pg_backend_pid()")
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_at_most_size_connections(pool: PgPool) -> None:
    holding = 0
    peak = 0
    release = asyncio.Event()

    async def hold() -> None:
        nonlocal holding, peak
        async with pool.connection() as conn:
            await pid(conn)
            holding += 1
            peak = max(peak, holding)
            await release.wait()
            holding -= 1

    tasks = [asyncio.create_task(hold()) for _ in range(4)]
    await asyncio.sleep(0.5)
    assert peak == 2
    release.set()
    await asyncio.gather(*tasks)
    assert peak == 2


async def test_a_connection_the_server_dropped_is_replaced(pool: PgPool, pg_db: str) -> None:
    async with pool.connection() as conn:
        first = await pid(conn)
    with psycopg.connect(database_url(pg_db), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (first,))
    await asyncio.sleep(0.1)
    await pool.reset()
    for _ in range(3):
        async with pool.connection() as conn:
            assert await pid(conn) != first


async def test_a_connection_given_back_mid_transaction_comes_back_idle(pool: PgPool) -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        async with pool.connection() as conn:
            await conn.execute("BEGIN")
            await conn.execute("CREATE TEMP TABLE leftover (x int)")
            raise Boom
    for _ in range(3):
        async with pool.connection() as conn:
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            cur = await conn.execute("SELECT to_regclass('pg_temp.leftover')")
            row = await cur.fetchone()
            assert row is not None and row[0] is None  # rolled back, not committed


async def test_closed_pool_refuses(pool: PgPool) -> None:
    async with pool.connection() as conn:
        await pid(conn)
    await pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        async with pool.connection():
            pass


def test_size_must_be_positive() -> None:
    with pytest.raises(ValueError):
        PgPool("postgresql://x", 0)
