"""The node's PostgreSQL connections: psycopg_pool behind the few calls the store makes.

psycopg_pool does the pooling (bound, waiting, discarding broken connections,
rolling back a connection returned inside a transaction, reconnecting in the
background); this adapter fixes the settings the store relies on and keeps
one place to change them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from typing import Final

import psycopg
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

CHECK_WAIT_S: Final = 0.2
"""The longest a caller waits for a check of the idle connections: a few ms
when the server answers or has closed them (the connections being checked
are out of the pool meanwhile, so no other caller gets a dead one). On a
silent network the check goes on in the background until the connections
answer or fail. It is not cancelled: psycopg answers the cancellation of a
statement with a cancel request and a wait for its results, so a check
under ``asyncio.timeout`` outlived its timeout by minutes (measured: over
two, on a relay that held every byte), and the request behind it with it."""


@contextlib.asynccontextmanager
async def abort_after(conn: PgConn, seconds: float) -> AsyncIterator[None]:
    """Past ``seconds``, shut ``conn``'s socket down: what waits on it fails at
    once (``OperationalError``; the connection is broken, and the pool drops
    it). A cancellation is no such bound on a silent network: psycopg answers
    one by sending a cancel request and waiting for the statement's results,
    5 s each, before it lets the cancelled task go."""
    handle = asyncio.get_running_loop().call_later(seconds, _shut_down, conn)
    try:
        yield
    finally:
        handle.cancel()


def _shut_down(conn: PgConn) -> None:
    with contextlib.suppress(OSError, psycopg.Error):
        fd = conn.pgconn.socket
        sock = socket.socket(fileno=os.dup(fd))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()


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
        self.size = size
        """The most pooled connections at once."""
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
        self._checking: asyncio.Task[None] | None = None

    async def connect(self, *, application_name: str | None = None) -> PgConn:
        """A new connection outside the pool (the listener's, a migration's),
        named ``application_name`` when given (else as the URL says)."""
        if application_name is None:
            return await AsyncConnection.connect(
                self._conninfo, autocommit=True, connect_timeout=self._connect_timeout
            )
        return await AsyncConnection.connect(
            self._conninfo,
            autocommit=True,
            connect_timeout=self._connect_timeout,
            application_name=application_name,
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
        """Check the idle connections (one check at a time), waiting at most
        CHECK_WAIT_S for it; it is never cancelled part way (see there)."""
        if not self._opened or self._closed:
            return
        task = self._checking
        if task is None or task.done():
            task = self._checking = asyncio.get_running_loop().create_task(self._run_check())
        await asyncio.wait([task], timeout=CHECK_WAIT_S)

    async def _run_check(self) -> None:
        with contextlib.suppress(Exception):
            await self._pool.check()

    async def reset(self) -> None:
        """After the server restarted: check the idle connections, drop the dead ones."""
        await self._check()

    async def close(self) -> None:
        self._closed = True
        task = self._checking
        if task is not None:
            task.cancel()  # the pool closes its connections anyway
            with contextlib.suppress(BaseException):
                await task
        if self._opened:
            await self._pool.close()
