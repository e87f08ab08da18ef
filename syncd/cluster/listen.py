"""The LISTEN connection's reader: each notification to a callback, without a
wait of its own.

Theory of operation
-------------------
A node hears one notification per commit of every other node (and of its
own). psycopg's ``AsyncConnection.notifies()`` waits for each one anew: it
registers the socket with the event loop, waits, and takes it off again,
about a dozen system calls (``epoll_ctl``, ``ioctl``, ...) per notification,
which measured as most of what following the cluster cost a node (hundreds
of microseconds of CPU per notification against a few per record it
carries). :class:`NotifyReader` registers the socket once: whenever it is
readable, libpq reads what arrived and each notification goes to the
callback, in the order the server sent them.

The connection stays an ordinary psycopg connection. :meth:`NotifyReader.paused`
takes the reader off while a query runs on it (the cluster's probe); psycopg
itself hands what arrives meanwhile to the same callback (a notify handler),
so nothing is lost or reordered. A connection that breaks shows as the error
:meth:`NotifyReader.wait` raises; the caller reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from psycopg import Notify

from syncd.store.pg_pool import PgConn

__all__ = ["NotifyReader"]


class NotifyReader:
    def __init__(self, conn: PgConn, on_payload: Callable[[str], None]) -> None:
        """Hand ``conn``'s notifications to ``on_payload``: those psycopg reads
        during a query at once, the rest once :meth:`start` is called."""
        self._conn = conn
        self._on_payload = on_payload
        self._loop = asyncio.get_running_loop()
        self._fd = -1
        """The socket registered with the loop, -1 when none (kept: once libpq has
        dropped a broken connection, its socket can no longer be asked for)."""
        self._failed: BaseException | None = None
        self._woken = asyncio.Event()
        conn.add_notify_handler(self._handled)

    def _handled(self, notify: Notify) -> None:
        self._on_payload(notify.payload)

    def start(self) -> None:
        """Read the socket whenever it is readable (until :meth:`stop`)."""
        if self._fd >= 0 or self._failed is not None:
            return
        self._fd = self._conn.pgconn.socket
        self._loop.add_reader(self._fd, self._readable)
        self._readable()  # what libpq may hold already

    def stop(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(Exception):  # closed by libpq already
                self._loop.remove_reader(fd)

    def _readable(self) -> None:
        pgconn = self._conn.pgconn
        try:
            pgconn.consume_input()
        except Exception as exc:  # psycopg.OperationalError: the connection broke
            self.stop()
            self._failed = exc
            self._woken.set()
            return
        while (notify := pgconn.notifies()) is not None:
            self._on_payload(notify.extra.decode(errors="replace"))

    @contextlib.asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        """Run a query on the connection meanwhile (psycopg reads it then); the
        reader starts again only if that went well (else the caller reconnects)."""
        self.stop()
        yield
        self.start()

    async def wait(self, seconds: float) -> None:
        """Return after ``seconds``; raise at once when the connection breaks."""
        if self._failed is None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self._woken.wait()
        if self._failed is not None:
            raise self._failed

    def close(self) -> None:
        self.stop()
        with contextlib.suppress(ValueError):
            self._conn.remove_notify_handler(self._handled)
