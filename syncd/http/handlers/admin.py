"""``POST /v1/admin/backup`` (docs/operations.md#backup-and-restore): an online
backup of the embedded store, streamed as a tar. Root admin only.

The store names the files of a consistent copy and holds off snapshots and
history compaction (which would delete them) until the stream ends, whatever
way it ends. A worker thread reads the files straight from the data
directory into a tar (``syncd.store.backup.stream_plan``: nothing is copied
on the server's disk) and hands the pieces to the loop through a small queue;
the loop writes them with the connection's backpressure, so a slow reader
holds a few buffers of memory, not the backup. On PostgreSQL the answer is
409 ``unsupported``: use the database's own tools (pg_dump, or base backups
with WAL archiving). One backup runs at a time (``MAX_CONCURRENT_BACKUPS``):
another asked for meanwhile is 429 ``rate_limited`` with ``Retry-After``, and
the running one goes on undisturbed.

To an HTTP/1.1 client the tar goes as a chunked body (``transfer-encoding:
chunked``): its last chunk is sent only once the whole tar has been, so a
stream that stops early (the server killed, the backup failing half-way,
the connection cut) is incomplete at the HTTP level, whatever byte it stops
at, and any client library reports it instead of handing on a short body as
whole. An HTTP/1.0 client cannot take a chunked body: it gets the tar up to
the connection's close, and must require the tar's trailing manifest itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import re
import shutil
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from syncd.auth.admin import ADMIN_TOKEN_FILE
from syncd.auth.authenticator import Authenticator, rate_limited
from syncd.errors import ApiError, bad_request
from syncd.http.handlers.guards import authenticated, root_admin_guard
from syncd.http.request import Request
from syncd.http.response import StreamResponse, StreamSink
from syncd.http.router import Router
from syncd.store.embedded.backup import Plan, stream_plan

log = logging.getLogger("syncd.http")

BACKUP_PATH: Final = "/v1/admin/backup"
TAR_TYPE: Final = b"application/x-tar"
CHUNKED: Final = (b"transfer-encoding", b"chunked")
LAST_CHUNK: Final = b"0\r\n\r\n"
"""The chunked body's end (no trailers): sent once the whole tar has been."""
QUERY_NAMES: Final = ("max_rate", "admin_token")
"""The route's query parameters: each at most once (400 otherwise, as on the
history and listing routes: which of two values was meant is a guess)."""

STREAM_HIGH_WATER_BYTES: Final = 4 * 1024 * 1024
"""Unsent bytes past which the stream waits for the peer to drain."""

MAX_RATE_LIMIT_MIB_S: Final = 1_000_000.0
"""The largest ``?max_rate=`` taken (MiB/s): beyond any disk, i.e. no limit."""

MIN_RATE_LIMIT_MIB_S: Final = 1.0
"""The smallest ``?max_rate=`` taken (MiB/s). A backup holds off the store's
snapshots and history compaction until it ends (the log and the history grow
meanwhile), so its pace bounds how long they wait: at 1 MiB/s that is about
17 minutes per GiB of data directory, under a day for a store of 80 GiB. A
slower rate would hold them for days, and no disk needs one to keep up."""

MAX_CONCURRENT_BACKUPS: Final = 1
"""Backups in progress at once, from the request to the stream's end (done,
left by the client, or failed). Each holds off the store's snapshots and
history compaction and reads the whole data directory; the store lets one
hold at a time, so a second would not run beside the first but wait for it
on an open connection (and then read everything again), and every further
one would queue behind it. One copy as of now is what a backup is for: the
next is refused at once instead (429, ``BACKUP_RETRY_AFTER_S``)."""

BACKUP_RETRY_AFTER_S: Final = 10
"""``Retry-After`` of a backup refused while another runs. How long that one
takes is not known (the store's size, ``max_rate``, how fast its client
reads); the refusal costs the server nothing, so a short wait lets a retrying
client start soon after it ends."""

PIPE_PIECES: Final = 4
"""Tar pieces (``TAR_BUFFER_BYTES`` each) the reading thread may be ahead of
the loop: with the high-water mark, what one backup holds in memory."""

TEMP_PREFIX: Final = ".backup-"
"""Work files of earlier versions, which copied the backup into the data
directory first; start-up removes any a crash left."""

_DECIMAL: Final = re.compile(r"[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?", re.ASCII)
"""A ``?max_rate=`` as numbers in query strings are written: ASCII digits,
a fraction and an exponent (what ``repr`` of a float gives, as ``syncd
backup`` sends it)."""

Backup = Callable[[], Awaitable[tuple[Plan, Callable[[], None]]]]
"""The store's ``backup_plan``: the files, and the call that ends the backup."""


def _busy() -> ApiError:
    return rate_limited(
        BACKUP_RETRY_AFTER_S,
        f"a backup is already in progress (at most {MAX_CONCURRENT_BACKUPS} at a time): "
        "ask again once it has ended",
    )


def _unsupported() -> ApiError:
    return ApiError(
        409,
        "unsupported",
        "the PostgreSQL store is backed up with PostgreSQL's tools (pg_dump, or base "
        "backups with WAL archiving), not by syncd",
    )


def remove_leftovers(data_dir: Path) -> None:
    """Work files of backups a crash interrupted (see TEMP_PREFIX)."""
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(data_dir):
            if entry.name.startswith(TEMP_PREFIX):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)


def register(router: Router, *, auth: Authenticator, backup: Backup | None) -> None:
    running = 0  # backups between their slot's taking and its giving back

    async def backup_route(request: Request) -> StreamResponse:
        nonlocal running
        principal = authenticated(auth, request, None)
        auth.check_admin(principal, None)
        if backup is None:
            raise _unsupported()
        query = request.known_query(QUERY_NAMES) if request.query_string else {}
        max_rate = _max_rate(query.get("max_rate"))
        with_admin_token = _flag(query.get("admin_token"), "admin_token")
        if running >= MAX_CONCURRENT_BACKUPS:
            raise _busy()
        running += 1
        ended = False

        def end() -> None:
            # Once, whichever way the backup ends: the stream's task is done
            # (finished, the client left, it failed), the peer left before it
            # began, or taking the plan failed.
            nonlocal running, ended
            if not ended:
                ended = True
                running -= 1

        try:
            plan, store_release = await backup()
        except BaseException:
            end()
            raise

        def release() -> None:
            try:
                store_release()
            finally:
                end()

        if not with_admin_token:
            # The generated admin secret stays on the server (the copy's
            # server makes a new one, or takes SERVICE_ADMIN_TOKEN).
            plan.files = [(rel, size) for rel, size in plan.files if rel != ADMIN_TOKEN_FILE]

        # HTTP/1.0 has no chunked coding: the connection's close ends its body.
        chunked = request.http_version == "1.1"

        def start(sink: StreamSink) -> None:
            task = asyncio.get_running_loop().create_task(_stream(sink, plan, max_rate, chunked))
            task.add_done_callback(lambda _: release())
            _tasks.add(task)
            task.add_done_callback(_tasks.discard)

        headers: tuple[tuple[bytes, bytes], ...] = (
            (b"x-syncd-backup-lsn", str(plan.lsn).encode()),
        )
        if chunked:
            headers += (CHUNKED,)
        return StreamResponse(start, TAR_TYPE, headers, abort=release)

    router.add("POST", BACKUP_PATH, backup_route, root_admin_guard(auth))


_tasks: set[asyncio.Task[None]] = set()


def _flag(text: str | None, name: str) -> bool:
    """A ``true``/``false`` query parameter, true when absent."""
    if text is None or text in ("true", "1"):
        return True
    if text in ("false", "0"):
        return False
    raise bad_request(f"{name}: true or false")


def _max_rate(text: str | None) -> float | None:
    """``?max_rate=MiB/s``: spread the backup's reads and sends over time, so
    it takes less of the server from the writes going on (bytes/s or None)."""
    if text is None:
        return None
    # float() alone would take "1_0", " 1" and non-ASCII digits (Arabic-Indic ones).
    rate = float(text) if _DECIMAL.fullmatch(text) else math.nan
    problem = max_rate_problem(rate)
    if problem is not None:
        raise bad_request(f"max_rate: {problem}")
    return rate * 1024 * 1024


def max_rate_problem(rate: float) -> str | None:
    """Why ``rate`` (MiB/s) is no backup rate, or None (``syncd backup --max-rate`` too)."""
    if MIN_RATE_LIMIT_MIB_S <= rate <= MAX_RATE_LIMIT_MIB_S:  # False for NaN
        return None
    return (
        f"MiB per second, at least {MIN_RATE_LIMIT_MIB_S:g} (slower, the backup would hold "
        f"off snapshots and compaction for days), at most {MAX_RATE_LIMIT_MIB_S:g}"
    )


class _Stopped(Exception):
    """The connection went away: the reading thread stops."""


async def _stream(sink: StreamSink, plan: Plan, max_rate: float | None, chunked: bool) -> None:
    """Send the tar of ``plan`` on ``sink``, as chunks when ``chunked``; on a
    failure the connection is dropped without the last chunk (incomplete)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    sent = 0
    pieces: asyncio.Queue[bytes | None] = asyncio.Queue(PIPE_PIECES)
    stopped = threading.Event()
    drained: asyncio.Future[None] | None = None

    def wake() -> None:
        if drained is not None and not drained.done():
            drained.set_result(None)

    def hand_over(piece: bytes) -> None:  # in the reading thread
        if stopped.is_set():
            raise _Stopped
        future = asyncio.run_coroutine_threadsafe(pieces.put(piece), loop)
        while True:
            try:
                future.result(timeout=0.5)
                return
            except TimeoutError:
                if stopped.is_set():
                    future.cancel()
                    raise _Stopped from None

    def produce() -> None:
        try:
            stream_plan(plan, hand_over)
        finally:
            if not stopped.is_set():
                asyncio.run_coroutine_threadsafe(pieces.put(None), loop)

    closed: asyncio.Future[None] = loop.create_future()

    def close() -> None:
        wake()
        if not closed.done():
            closed.set_result(None)

    sink.on_drain(wake)
    sink.on_close(close)
    producer = loop.run_in_executor(None, produce)
    try:
        while not sink.closed:
            piece = await pieces.get()
            if piece is None:
                break
            if not piece:
                continue  # an empty chunk would be read as the last one
            sink.write(b"%x\r\n%b\r\n" % (len(piece), piece) if chunked else piece)
            sent += len(piece)
            while sink.buffered() > STREAM_HIGH_WATER_BYTES and not sink.closed:
                drained = loop.create_future()
                await drained
            if max_rate is not None:
                ahead = sent / max_rate - (loop.time() - started)
                if ahead > 0:
                    # Ended by the connection's close too: at a rate slow
                    # enough, the pause outlasts the client, and the store
                    # stays held (snapshots, and a stopping server's close,
                    # wait for the backup) until it ends.
                    await asyncio.wait((closed,), timeout=ahead)
    finally:
        stopped.set()
        with contextlib.suppress(asyncio.QueueEmpty):
            while True:
                pieces.get_nowait()  # unblock a waiting put
    try:
        await producer
    except _Stopped:
        return  # the client left; nothing to finish
    except Exception:
        log.exception("streaming a backup failed")
        sink.abort()
        return
    if sink.closed:
        return
    if chunked:
        sink.write(LAST_CHUNK)
    sink.close()
