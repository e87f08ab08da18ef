"""Reaching PostgreSQL at start: which failures are worth waiting for, and which are mistakes.

Theory of operation
-------------------
A cluster node may start before its database does (a host booting, a
container started beside it, a failover under way). Those failures are
*transient*: :func:`keep_trying` retries them with backoff for as long as it
takes, and logs every attempt with the reason in PostgreSQL's (or libpq's)
own words, so the log says what failed (refused, starting up, too many
clients), not a guess. The node has not bound its socket yet, so a load
balancer sees it down, and SIGTERM ends the wait (``syncd.server``).

Other failures no amount of waiting fixes: a database that does not exist, a
password or role the server refuses, a role without the right to connect or
to replicate, a URL libpq cannot parse, a schema migrated by a newer syncd,
a server whose ``wal_level`` cannot feed ``SERVICE_WAL_CONNSTR``. They are
*permanent*: the start stops with :class:`DatabaseSetupError`, one line
naming the setting, and exit 2, as for any bad setting.

*How the two are told apart.* Once connected, PostgreSQL's errors carry a
SQLSTATE (``28xxx`` authorization, ``3D000`` no such database, ``42501``
insufficient privilege), and the drivers raise their own classes for what
they refuse before asking the server (a bad URL is a ``ProgrammingError``).
A connection that fails has no SQLSTATE, though: libpq keeps none of the
server's fields, so psycopg's ``sqlstate`` and psycopg2's ``pgcode`` are
None, and the cause is only in the message, ``FATAL:  <the server's
message>``. :data:`PERMANENT_MESSAGES` recognises PostgreSQL's messages for
the permanent causes. They are English unless the server's ``lc_messages``
says otherwise; a message not recognised counts as transient, which is the
safe side: the node keeps trying and logs the server's words.

This module imports no driver (the errors are read by their attributes), so
the server can name :class:`DatabaseSetupError` without the ``postgres``
extra installed.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

log = logging.getLogger("syncd.store.postgres")

T = TypeVar("T")

RETRY_MIN_S: Final = 0.1
RETRY_MAX_S: Final = 2.0
"""Backoff between start-up attempts while PostgreSQL cannot be reached: the
first retries come quickly (a server finishing its start), then one every
2 s, as the cluster's reconnects do (cheap for the server, and a node is up
within 2 s of its database)."""

PERMANENT_SQLSTATES: Final = frozenset(
    {
        "3D000",  # invalid_catalog_name: the database does not exist
        "3F000",  # invalid_schema_name: search_path names no schema we can use
        "42501",  # insufficient_privilege: the role may not connect, create or replicate
    }
)
"""SQLSTATEs, besides the whole ``28`` class (invalid authorization), that
mean the settings are wrong rather than the server busy or away."""

PERMANENT_MESSAGES: Final = re.compile(
    "|".join(
        (
            r'database ".*" does not exist',  # 3D000
            r"authentication failed for user",  # 28P01 password, 28000 ident/peer/ldap/cert
            r'role ".*" does not exist',  # 28000
            r"is not permitted to log in",  # 28000
            r"no pg_hba\.conf entry",  # 28000
            r"pg_hba\.conf rejects connection",  # 28000
            r"permission denied for database",  # 42501: no CONNECT privilege
            r"must be superuser or replication role",  # 42501 (PostgreSQL 15)
            r"permission denied to start WAL sender",  # 42501 (PostgreSQL 16 and later)
            r"max_wal_senders \(currently 0\)",  # wal_level=minimal: no replication at all
            r"no password supplied",  # libpq: the server asks for one, the URL has none
            r"SSL was required",  # libpq: sslmode=require against a server without TLS
        )
    )
)
"""What PostgreSQL (or libpq) says when it refuses a connection for good.
Without these (``lc_messages`` in another language) the same failures are
retried as transient, with the server's words in the log."""


class DatabaseSetupError(Exception):
    """PostgreSQL refused this node for a reason waiting will not fix.
    ``str()`` is the one line the CLI prints: the setting, then the cause."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting = setting
        self.problem = problem


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a psycopg (``sqlstate``) or psycopg2 (``pgcode``) error, if any."""
    code = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    return code if isinstance(code, str) and code else None


def permanent(exc: BaseException) -> bool:
    """Whether a failure to connect (or to set up) is one that waiting cannot fix."""
    code = sqlstate(exc)
    if code is not None:
        return code.startswith("28") or code in PERMANENT_SQLSTATES
    # psycopg keeps the failed connection: libpq's own verdict on the password.
    if getattr(getattr(exc, "pgconn", None), "needs_password", False) is True:
        return True
    return PERMANENT_MESSAGES.search(str(exc)) is not None


def describe(exc: BaseException) -> str:
    """One line saying what failed, in the server's or libpq's words.

    A refused connection reads ``connection failed: connection to server at
    ... failed: FATAL:  <message>``; what follows ``FATAL:`` is the cause. A
    network failure keeps its first line (libpq's hint follows on the next)."""
    text = str(exc).strip()
    fatal = text.rfind("FATAL:")
    cause = text[fatal + len("FATAL:") :] if fatal >= 0 else text.removeprefix("connection failed:")
    lines = cause.strip().splitlines()
    return " ".join(lines[0].split()) if lines else type(exc).__name__


async def keep_trying(
    attempt: Callable[[], Awaitable[T]],
    *,
    setting: str,
    errors: tuple[type[BaseException], ...],
    transient: tuple[type[BaseException], ...],
    give_up_after_s: float | None = None,
) -> T:
    """``attempt()``'s result, retried while it fails in a way worth waiting for.

    ``errors`` are the failures of the database library at all (anything else
    is a bug and propagates as it is); of those, ``transient`` ones (a lost or
    refused connection) are retried unless :func:`permanent` says otherwise,
    and the rest raise :class:`DatabaseSetupError` naming ``setting``.
    ``give_up_after_s`` bounds the waiting (tests); None waits until the
    caller is cancelled (SIGTERM at start)."""
    deadline = None if give_up_after_s is None else time.monotonic() + give_up_after_s
    delay = RETRY_MIN_S
    while True:
        try:
            return await attempt()
        except DatabaseSetupError:
            raise
        except errors as exc:
            if not isinstance(exc, transient) or permanent(exc):
                raise DatabaseSetupError(setting, describe(exc)) from None
            if deadline is not None and time.monotonic() + delay > deadline:
                raise
            log.warning(
                "waiting for PostgreSQL (%s): %s; trying again in %.1fs",
                setting,
                describe(exc),
                delay,
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, RETRY_MAX_S)
