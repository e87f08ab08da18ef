"""NotifyReader on a real LISTEN connection: every notification to the callback
in order, those that arrive during a query on the connection too, and a broken
connection raised at once, with the socket off the event loop."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from syncd.cluster.listen import NotifyReader
from tests.cluster.pgdb import database_url

pytestmark = pytest.mark.timeout(30)


async def notify(url: str, *payloads: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for payload in payloads:
            await conn.execute("SELECT pg_notify('ch', %s)", (payload,))


async def until(check: object, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "not reached in time"
        await asyncio.sleep(0.01)


async def test_notifications_reach_the_callback_in_order_also_during_a_query(
    cluster_db: str,
) -> None:
    url = database_url(cluster_db)
    got: list[str] = []
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    reader = NotifyReader(conn, got.append)
    try:
        await conn.execute("LISTEN ch")
        reader.start()
        await notify(url, "a", "b", "c")
        await until(lambda: got == ["a", "b", "c"])
        async with reader.paused():
            # A query on the listener while another session notifies: psycopg
            # reads those with the query's answer and hands them over itself.
            await notify(url, "d")
            cur = await conn.execute("SELECT pg_sleep(0.2), 1")
            assert (await cur.fetchone()) == ("", 1)
            await notify(url, "e")
            await conn.execute("SELECT 1")
        await notify(url, "f")
        await until(lambda: got[-1:] == ["f"])
        assert got == ["a", "b", "c", "d", "e", "f"]
        await reader.wait(0.01)  # nothing wrong: returns after the time given
    finally:
        reader.close()
        await conn.close()


async def test_a_broken_connection_is_raised_at_once_and_its_socket_let_go(
    cluster_db: str,
) -> None:
    url = database_url(cluster_db)
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    reader = NotifyReader(conn, lambda payload: None)
    try:
        await conn.execute("LISTEN ch")
        pid = conn.info.backend_pid
        reader.start()
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError):
            await reader.wait(10)
        assert time.monotonic() - started < 5
        assert reader._fd == -1  # off the loop: a new socket may take its number
        reader.start()  # a failed reader stays stopped
        assert reader._fd == -1
    finally:
        reader.close()
        await conn.close()
