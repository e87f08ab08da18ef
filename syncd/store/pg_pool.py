"""The node's PostgreSQL connections: psycopg_pool behind the few calls the store makes.

psycopg_pool does the pooling (bound, waiting, discarding broken connections,
rolling back a connection returned inside a transaction, reconnecting in the
background); this adapter fixes the settings the store relies on and keeps
one place to change them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Final

from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolClosed

PgConn = AsyncConnection[TupleRow]

DEFAULT_POOL_SIZE: Final = 10
"""Concurrent transactions per node (commits are serialised per CRDT, so this
bounds how many different CRDTs commit at once). A commit mostly waits for
its WAL flush, which PostgreSQL shares between the commits waiting together
(group commit): throughput grows with this until the disk or the CPU is the
limit. Three nodes use about 36 of PostgreSQL's default 100 connections."""

CONNECT_TIMEOUT_S: Final = 3
"""libpq connect_timeout (whole seconds): how long a connection attempt to an
unreachable server may take before the op answers 503. Waiting for a pooled
connection is bounded by the same time plus a second."""

RECONNECT_GIVE_UP_S: Final = 2.0
"""How long the pool keeps retrying one failed connection attempt (psycopg_pool's
``reconnect_timeout``) before it gives up and waits for the next checkout to
try again. psycopg_pool backs off 1, 2, 4, 8 s ... between attempts (for 5
minutes by default), so after an outage of a minute its next attempt could be
a minute after the server was back: the node's listener reconnected and
reported ready while every op waited for a connection and answered 503.
Given up after this, an attempt starts with the next checkout, at once."""

CHECK_TIMEOUT_S: Final = 5.0
"""The longest a check of the idle connections may take (one that hangs on a
silent network is given up)."""


class PgPool:
    def __init__(
        self,
        conninfo: str,
        size: int = DEFAULT_POOL_SIZE,
        *,
        connect_timeout_s: int = CONNECT_TIMEOUT_S,
    ) -> None:
        if size < 1:
            raise ValueError("pool size must be at least 1")
        self._conninfo = conninfo
        self._connect_timeout = connect_timeout_s
        self._pool: AsyncConnectionPool[PgConn] = AsyncConnectionPool(
            conninfo,
            min_size=1,
            max_size=size,
            kwargs={"autocommit": True, "connect_timeout": connect_timeout_s},
            open=False,
            timeout=connect_timeout_s + 1,
            reconnect_timeout=RECONNECT_GIVE_UP_S,
            name="syncd",
        )
        self._opened = False
        self._closed = False

    async def connect(self) -> PgConn:
        """A new connection outside the pool (the listener's, a migration's)."""
        return await AsyncConnection.connect(
            self._conninfo, autocommit=True, connect_timeout=self._connect_timeout
        )

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[PgConn]:
        if self._closed:
            raise RuntimeError("the pool is closed")
        if not self._opened:
            self._opened = True
            # Background workers fill the pool; an unreachable server shows
            # as a timeout on the first checkout rather than at start.
            await self._pool.open(wait=False)
        broken = False
        try:
            async with self._pool.connection() as conn:
                try:
                    yield conn
                finally:
                    broken = conn.broken
        except PoolClosed:
            raise RuntimeError("the pool is closed") from None
        finally:
            if broken:
                # The connection was lost under its user (the pool drops it).
                # Its idle siblings may be as dead (ended by the server, a
                # proxy, an idle timeout, while the listener's was fine):
                # checked now, not found one by one, each by a request that
                # then fails.
                await self._check()

    async def _check(self) -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CHECK_TIMEOUT_S):
                await self._pool.check()

    async def reset(self) -> None:
        """After the server restarted: check the idle connections, drop the dead ones."""
        if self._opened and not self._closed:
            await self._pool.check()

    async def close(self) -> None:
        self._closed = True
        if self._opened:
            await self._pool.close()
